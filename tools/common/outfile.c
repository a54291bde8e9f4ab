#include "outfile.h"

#include <errno.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* a and b name the same existing file (same device and inode) */
static bool same_file(const char* a, const char* b)
{
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

static int cli_check_input(const char* tool, const char* flag, const char* path, bool dir_ok)
{
    struct stat st;
    if (!*path) {
        fprintf(stderr, "%s: %s: empty path\n", tool, flag);
        return 1;
    }
    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: %s %s: %s\n", tool, flag, path, strerror(errno));
        return 1;
    }
    if (S_ISDIR(st.st_mode) ? !dir_ok : !S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: %s %s: not a regular file%s\n", tool, flag, path, dir_ok ? " or a directory" : "");
        return 1;
    }
    if (access(path, S_ISDIR(st.st_mode) ? R_OK | X_OK : R_OK) != 0) {
        fprintf(stderr, "%s: %s %s: cannot read: %s\n", tool, flag, path, strerror(errno));
        return 1;
    }
    return 0;
}

int cli_check_output(const char* tool, const char* flag, const char* path, const char* const* inputs, int n,
                      const char* const* outs, const char* const* out_flags, int n_outs)
{
    struct stat st;
    if (!*path) {
        fprintf(stderr, "%s: %s: empty path\n", tool, flag);
        return 1;
    }
    if (strlen(path) >= sizeof ((outfile*)0)->path) {
        fprintf(stderr, "%s: %s: path too long\n", tool, flag);
        return 1;
    }
    for (int i = 0; i < n; i++)
        if (inputs[i] && (!strcmp(inputs[i], path) || same_file(inputs[i], path))) {
            fprintf(stderr, "%s: %s %s: refusing to write an input of this run\n", tool, flag, path);
            return 2;
        }
    for (int i = 0; i < n_outs; i++)
        if (outs[i] && (!strcmp(outs[i], path) || same_file(outs[i], path))) {
            fprintf(stderr, "%s: %s %s: the same path as %s, another output of this run\n", tool, flag, path, out_flags[i]);
            return 2;
        }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: %s %s: exists and is not a regular file\n", tool, flag, path);
        return 1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    const char* d = dirname(dir);
    if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s: %s %s: directory %s does not exist\n", tool, flag, path, d);
        return 1;
    }
    if (access(d, W_OK | X_OK) != 0) {
        fprintf(stderr, "%s: %s %s: cannot write in %s: %s\n", tool, flag, path, d, strerror(errno));
        return 1;
    }
    return 0;
}

int cli_check_paths(const char* tool, const cli_path* in, int n_in, const cli_path* out, int n_out)
{
    const char *ins[8], *outs[8], *flags[8];
    int rc;
    for (int i = 0; i < n_in && i < 8; i++) {
        ins[i] = in[i].path;
        if (in[i].path && (rc = cli_check_input(tool, in[i].flag, in[i].path, in[i].dir_ok)) != 0)
            return rc;
    }
    for (int i = 0; i < n_out && i < 8; i++) {
        outs[i] = out[i].path;
        flags[i] = out[i].flag;
        if (out[i].path && (rc = cli_check_output(tool, out[i].flag, out[i].path, ins, n_in, outs, flags, i)) != 0)
            return rc;
    }
    return 0;
}

void outset_init(outset* s, const char* tool)
{
    memset(s, 0, sizeof *s);
    s->tool = tool;
}

static outfile* add(outset* s, const char* path)
{
    if (s->n >= OUTSET_MAX || strlen(path) >= sizeof s->o[0].path) {
        fprintf(stderr, "%s: %s: too many outputs or path too long\n", s->tool, path);
        s->failed = true;
        return NULL;
    }
    outfile* o = &s->o[s->n++];
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    return o;
}

FILE* outset_open(outset* s, const char* path)
{
    outfile* o = add(s, path);
    if (!o)
        return NULL;
    o->f = fopen(o->tmp, "w");
    if (!o->f) {
        fprintf(stderr, "%s: %s: cannot write: %s\n", s->tool, path, strerror(errno));
        s->failed = true;
    }
    return o->f;
}

const char* outset_reserve(outset* s, const char* path)
{
    outfile* o = add(s, path);
    return o ? o->tmp : NULL;
}

bool outset_commit(outset* s, bool ok)
{
    ok = ok && !s->failed;
    for (int i = 0; i < s->n; i++) {
        outfile* o = &s->o[i];
        if (o->f) {
            bool err = ferror(o->f) != 0;
            if (fclose(o->f) != 0)
                err = true;
            o->f = NULL;
            if (err) {
                if (ok)
                    fprintf(stderr, "%s: %s: write failed: %s\n", s->tool, o->path, strerror(errno));
                ok = false;
            }
        }
    }
    /* a reserved temp its writer did not produce is a failure too */
    for (int i = 0; ok && i < s->n; i++)
        if (access(s->o[i].tmp, F_OK) != 0) {
            fprintf(stderr, "%s: %s: was not written\n", s->tool, s->o[i].path);
            ok = false;
        }
    for (int i = 0; ok && i < s->n; i++)
        if (rename(s->o[i].tmp, s->o[i].path) != 0) {
            fprintf(stderr, "%s: %s: cannot rename into place: %s\n", s->tool, s->o[i].path, strerror(errno));
            ok = false;
        }
    if (!ok)
        for (int i = 0; i < s->n; i++)
            unlink(s->o[i].tmp);
    s->n = 0;
    return ok;
}
