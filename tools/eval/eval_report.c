/* vkh2o-eval: the report of its rows: the table, the CSV and JSON files and the plot. */
#include "eval.h"
#include "cli.h"
#include "outfile.h"
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v in the format %<w>.<prec>f and a space, or "-" in that width when it was not measured (NAN) */
static void cell(double v, int w, int prec)
{
    if (isnan(v))
        printf("%*s ", w, "-");
    else
        printf("%*.*f ", w, prec, v);
}

void print_rows(const opts* o, const row* rows, uint32_t n)
{
    printf("%-10s %6s %6s %6s %6s %9s %6s %-16s %10s %10s %8s %8s %8s %8s\n", "policy", "sinks", "budget", "recent", "cache",
           "bytes", "ctx", "kv_quant", "bits/byte", "ppl/byte", "passkey", "stream", "rec.1st", "rec.2nd");
    for (uint32_t i = 0; i < n; i++) {
        const row* r = &rows[i];
        printf("%-10s %6u %6u %6u %6u %9llu %6u %-16s ", r->policy->name, r->n_sink, r->budget, r->n_recent, r->cache_tokens,
               (unsigned long long)r->cache_bytes, o->ctx, r->kv_quant);
        cell(r->bits, 10, 4);
        cell(pow(2.0, r->bits), 10, 4);
        cell(r->passkey_acc, 8, 3);
        cell(r->passkey_stream, 8, 3);
        cell(r->recall_first, 8, 3);
        if (isnan(r->recall_first))
            printf("%8s\n", "-");
        else
            printf("%8.3f\n", r->recall_second);
        if (!isnan(r->recall_first)) {
            printf("           recurrence by depth (1st -> 2nd bits/byte):");
            for (int d = 0; d < 3; d++)
                printf(" %s %.3f -> %.3f", RECALL_DEPTHS[d], r->recall_first_d[d], r->recall_second_d[d]);
            printf("\n");
        }
        for (int k = 0; k < 2; k++) {
            double acc = k ? r->passkey_stream : r->passkey_acc;
            if (isnan(acc))
                continue;
            printf("           passkey%s by depth:", k ? " (stream)" : "");
            for (uint32_t d = 0; d < o->ndepths; d++)
                printf(" %.2f:%.2f", o->depths[d], (k ? r->stream_by_depth : r->acc_by_depth)[d]);
            printf("\n");
        }
    }
}

void json_num(FILE* f, const char* key, double v, const char* fmt)
{
    fprintf(f, "\"%s\": ", key);
    if (isnan(v))
        fprintf(f, "null");
    else
        fprintf(f, fmt, v);
}

static void json_depths(FILE* f, const char* key, const opts* o, const double* by)
{
    fprintf(f, ", \"%s\": {", key);
    for (uint32_t d = 0; d < o->ndepths; d++)
        fprintf(f, "%s\"%.3g\": %.4f", d ? ", " : "", o->depths[d], by[d]);
    fprintf(f, "}");
}

static bool write_plot(FILE* f, const opts* o, const row* rows, uint32_t n)
{
    /* one series per policy: x = cache size as % of the context; the full cache joins every
     * series at 100 % */
    static double xs[NPOLICIES + 1][MAX_ROWS], ppl[NPOLICIES + 1][MAX_ROWS], pk[NPOLICIES + 1][MAX_ROWS];
    static double kb[NPOLICIES + 1][MAX_ROWS], pks[NPOLICIES + 1][MAX_ROWS], rec[NPOLICIES + 1][MAX_ROWS];
    plot_series sp[NPOLICIES + 1], sk[NPOLICIES + 1], sb[NPOLICIES + 1], ss[NPOLICIES + 1], sr[NPOLICIES + 1];
    uint32_t ns = 0;
    const row* full = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].policy->full && !ROW_KV(&rows[i]))
            full = &rows[i];
    for (size_t k = 0; k < NPOLICIES; k++) {
        if (POLICY(k)->full)
            continue;
        uint32_t c = 0;
        for (uint32_t i = 0; i < n && c < MAX_ROWS - 1; i++)
            if (rows[i].policy == POLICY(k) && !rows[i].ladder) {
                kb[ns][c] = rows[i].cache_bytes / 1024.0;
                xs[ns][c] = 100.0 * rows[i].cache_tokens / o->ctx;
                ppl[ns][c] = isnan(rows[i].bits) ? NAN : pow(2.0, rows[i].bits);
                pk[ns][c] = rows[i].passkey_acc;
                pks[ns][c] = rows[i].passkey_stream;
                rec[ns][c] = rows[i].recall_second;
                c++;
            }
        if (!c)
            continue;
        if (full) {
            kb[ns][c] = full->cache_bytes / 1024.0;
            xs[ns][c] = 100.0;
            ppl[ns][c] = isnan(full->bits) ? NAN : pow(2.0, full->bits);
            pk[ns][c] = full->passkey_acc;
            pks[ns][c] = full->passkey_stream;
            rec[ns][c] = full->recall_second;
            c++;
        }
        sp[ns] = (plot_series){ POLICY(k)->name, c, xs[ns], ppl[ns] };
        sk[ns] = (plot_series){ POLICY(k)->name, c, xs[ns], pk[ns] };
        sb[ns] = (plot_series){ POLICY(k)->name, c, kb[ns], ppl[ns] };
        ss[ns] = (plot_series){ POLICY(k)->name, c, xs[ns], pks[ns] };
        sr[ns] = (plot_series){ POLICY(k)->name, c, xs[ns], rec[ns] };
        ns++;
    }
    /* the quantisation ladders: one series over them, by bytes */
    uint32_t nq = 0, order[MAX_ROWS];
    for (uint32_t i = 0; i < n; i++)
        if (rows[i].ladder)
            order[nq++] = i;
    for (uint32_t a = 1; a < nq; a++)
        for (uint32_t b = a; b > 0 && rows[order[b]].cache_bytes < rows[order[b - 1]].cache_bytes; b--) {
            uint32_t t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    uint32_t nb = ns;
    if (nq) {
        for (uint32_t a = 0; a < nq; a++) {
            kb[nb][a] = rows[order[a]].cache_bytes / 1024.0;
            ppl[nb][a] = isnan(rows[order[a]].bits) ? NAN : pow(2.0, rows[order[a]].bits);
        }
        sb[nb] = (plot_series){ "quantisation ladders (--kv-quant)", nq, kb[nb], ppl[nb] };
        nb++;
    }
    plot_panel panels[5] = {
        { "perplexity per byte (held-out text)", "cache size, % of the context", "perplexity per byte", sp, ns },
        { "perplexity at equal cache bytes", "cache bytes, KiB (all layers)", "perplexity per byte", sb, nb },
    };
    uint32_t np = 2;
    if (o->recall)
        panels[np++] = (plot_panel){ "recurring passage: its recurrence", "cache size, % of the context", "bits per byte", sr, ns };
    if (o->passkey)
        panels[np++] = (plot_panel){ "passkey accuracy (prompt compressed once)", "cache size, % of the context",
                                     "exact-match accuracy", sk, ns };
    if (o->passkey && o->stream)
        panels[np++] = (plot_panel){ "passkey accuracy (prompt streamed, evicting)", "cache size, % of the context",
                                     "exact-match accuracy", ss, ns };
    return plot_svg(f, panels, np);
}

/* write_outputs: fp16_bytes is the full FP16 cache's bytes (2 bytes per number of the latent
 * row, every position of --ctx, every layer): the base of --bytes F%, written on the forward's row. */
bool write_outputs(const opts* o, const row* rows, uint32_t n, uint64_t fp16_bytes)
{
    outset os;
    outset_init(&os, TOOL);
    FILE* fc = o->csv ? outset_open(&os, o->csv) : NULL;
    FILE* fj = o->json ? outset_open(&os, o->json) : NULL;
    FILE* fp = o->plot ? outset_open(&os, o->plot) : NULL;
    bool ok = (!o->csv || fc) && (!o->json || fj) && (!o->plot || fp);
    if (ok && fc) {
        fprintf(fc, "policy,n_sink,budget,n_recent,cache_tokens,cache_bytes,ctx,kv_quant,bits_per_byte,ppl,passkey_acc,"
                    "passkey_stream_acc,recall_first_bits,recall_second_bits\n");
        for (uint32_t i = 0; i < n; i++) {
            const row* r = &rows[i];
            fprintf(fc, "%s,%u,%u,%u,%u,%llu,%u,%s,%.6f,%.6f,%.4f,%.4f,%.6f,%.6f\n", r->policy->name, r->n_sink, r->budget,
                    r->n_recent, r->cache_tokens, (unsigned long long)r->cache_bytes, o->ctx, r->kv_quant, r->bits,
                    pow(2.0, r->bits), r->passkey_acc, r->passkey_stream, r->recall_first, r->recall_second);
        }
    }
    if (ok && fj) {
        fprintf(fj, "[\n");
        for (uint32_t i = 0; i < n; i++) {
            const row* r = &rows[i];
            fprintf(fj, "  {\"policy\": \"%s\", \"budget\": %u, \"n_sink\": %u, \"n_recent\": %u, \"cache_tokens\": %u, "
                        "\"cache_bytes\": %llu, \"ctx\": %u, \"kv_quant\": \"%s\", ",
                    r->policy->name, r->budget, r->n_sink, r->n_recent, r->cache_tokens, (unsigned long long)r->cache_bytes,
                    o->ctx, r->kv_quant);
            if (r->policy->full && !ROW_KV(r))   /* the base every --bytes F% is a fraction of */
                fprintf(fj, "\"fp16_bytes\": %llu, ", (unsigned long long)fp16_bytes);
            if (o->n_protect && !r->policy->full)   /* --n-protect: the evicting row's protected window */
                fprintf(fj, "\"n_protect\": %u, ", o->n_protect);
            if (ROW_KV(r) && r->d.bytes_frac > 0)   /* the one KV cache's capacity: a fraction of the FP16 cache's bytes */
                fprintf(fj, "\"kv_capacity\": %.6g, ", r->d.bytes_frac);
            if (r->requant_arg)   /* the requantisation source and what the cache held at the end of the text */
                fprintf(fj, "\"requant\": \"%s\", \"held_bytes\": %llu, \"shadow_bytes\": %llu, ", r->requant_arg,
                        (unsigned long long)r->held_bytes, (unsigned long long)r->shadow_bytes);
            json_num(fj, "bits_per_byte", r->bits, "%.6f");
            fprintf(fj, ", ");
            json_num(fj, "ppl", isnan(r->bits) ? NAN : pow(2.0, r->bits), "%.6f");
            fprintf(fj, ", \"bytes_scored\": %llu, ", (unsigned long long)r->bytes_scored);
            json_num(fj, "passkey_acc", r->passkey_acc, "%.4f");
            if (!isnan(r->passkey_acc))
                json_depths(fj, "passkey_by_depth", o, r->acc_by_depth);
            fprintf(fj, ", ");
            json_num(fj, "passkey_stream_acc", r->passkey_stream, "%.4f");
            if (!isnan(r->passkey_stream))
                json_depths(fj, "passkey_stream_by_depth", o, r->stream_by_depth);
            fprintf(fj, ", ");
            json_num(fj, "recall_first_bits", r->recall_first, "%.6f");
            fprintf(fj, ", ");
            json_num(fj, "recall_second_bits", r->recall_second, "%.6f");
            if (!isnan(r->recall_first)) {
                fprintf(fj, ", \"recall_by_depth\": {");
                for (int d = 0; d < 3; d++) {
                    fprintf(fj, "%s\"%s\": {\"at\": %u, ", d ? ", " : "", RECALL_DEPTHS[d], r->recall_at[d]);
                    json_num(fj, "first_bits", r->recall_first_d[d], "%.6f");
                    fprintf(fj, ", ");
                    json_num(fj, "second_bits", r->recall_second_d[d], "%.6f");
                    fprintf(fj, "}");
                }
                fprintf(fj, "}");
            }
            fprintf(fj, "}%s\n", i + 1 < n ? "," : "");
        }
        fprintf(fj, "]\n");
    }
    if (ok && fp)
        ok = write_plot(fp, o, rows, n);
    return outset_commit(&os, ok) && ok;
}

