/* Output files written atomically: to "<path>.tmp.<pid>", renamed over path when complete,
 * removed on failure, so a failed run never leaves a half-written file. Refuses a path that
 * is one of the run's input files. */
#ifndef VKH2O_OUTFILE_H
#define VKH2O_OUTFILE_H
#include <stdbool.h>
#include <stdio.h>

typedef struct outfile {
    FILE* f;
    char path[4096];
    char tmp[4200];
} outfile;

/* Opens the temporary file. Prints "<tool>: <path>: <reason>" and returns false on failure. */
bool outfile_open(outfile* o, const char* tool, const char* path);
/* Closes and renames (ok = true) or removes (ok = false); false if the close/rename failed. */
bool outfile_close(outfile* o, const char* tool, bool ok);
/* True when a and b name the same existing file (same device and inode). */
bool same_file(const char* a, const char* b);
#endif
