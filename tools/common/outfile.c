#include "outfile.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool outfile_open(outfile* o, const char* tool, const char* path)
{
    memset(o, 0, sizeof *o);
    if (strlen(path) >= sizeof o->path) {
        fprintf(stderr, "%s: %s: path too long\n", tool, path);
        return false;
    }
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "w");
    if (!o->f) {
        fprintf(stderr, "%s: %s: cannot write: %s\n", tool, path, strerror(errno));
        return false;
    }
    return true;
}

bool outfile_close(outfile* o, const char* tool, bool ok)
{
    if (!o->f)
        return false;
    bool err = ferror(o->f) != 0;
    if (fclose(o->f) != 0)
        err = true;
    o->f = NULL;
    if (!ok || err) {
        if (err)
            fprintf(stderr, "%s: %s: write failed: %s\n", tool, o->path, strerror(errno));
        unlink(o->tmp);
        return false;
    }
    if (rename(o->tmp, o->path) != 0) {
        fprintf(stderr, "%s: %s: cannot rename into place: %s\n", tool, o->path, strerror(errno));
        unlink(o->tmp);
        return false;
    }
    return true;
}

bool same_file(const char* a, const char* b)
{
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0)
        return false;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
