/* The tools' files: inputs checked before any work, and outputs written all together at the
 * end of a run. Every output goes to "<path>.tmp.<pid>" first; only when the whole run has
 * succeeded are they all renamed into place, so a run that fails leaves none of its outputs
 * behind (and never a half-written one). Messages name the flag and the path. */
#ifndef VKH2O_OUTFILE_H
#define VKH2O_OUTFILE_H
#include <stdbool.h>
#include <stdio.h>

/* An output given with flag, before any work: its directory must exist and be writable, and the
 * path, if it exists, must be a regular file that is none of the n inputs (NULL entries are
 * skipped) nor an earlier output of the same run (outs, given with out_flags; n_outs of them).
 * Returns 0 when so; otherwise prints the reason naming the flag (and the other output's) and
 * returns the exit status: 2 for a path that names an input or another output (bad usage), 1 for
 * a file problem (no such directory, not writable, not a regular file). */
int cli_check_output(const char* tool, const char* flag, const char* path, const char* const* inputs, int n,
                      const char* const* outs, const char* const* out_flags, int n_outs);
/* A path of the run with its flag (a NULL path: not given, skipped); dir_ok: an input that may
 * be a directory. */
typedef struct cli_path {
    const char* flag;
    const char* path;
    bool dir_ok;
} cli_path;
/* Every path of a run, before any work: each input must exist and be readable, and be a regular
 * file (or, with dir_ok, a directory), else "<tool>: <flag> <path>: <reason>" and exit status 1;
 * then each output by cli_check_output against the inputs and the outputs before it (at most 8
 * of each). Returns 0 or the first failure's exit status. */
int cli_check_paths(const char* tool, const cli_path* in, int n_in, const cli_path* out, int n_out);

#define OUTSET_MAX 8
typedef struct outfile {
    FILE* f;             /* NULL for a file its writer creates itself (outset_reserve) */
    char path[4096];
    char tmp[4200];
} outfile;

typedef struct outset {
    const char* tool;
    int n;
    bool failed;         /* a temp could not be opened or written */
    outfile o[OUTSET_MAX];
} outset;

void outset_init(outset* s, const char* tool);
/* The temporary file of output path, open for writing; NULL (message printed) on failure. */
FILE* outset_open(outset* s, const char* path);
/* The temporary name of output path, for a writer that creates the file itself (it must not
 * rename it); NULL on failure. */
const char* outset_reserve(outset* s, const char* path);
/* Ends the run's outputs: with ok and every write successful, renames all of them into place
 * and returns true; otherwise removes every temporary and returns false. */
bool outset_commit(outset* s, bool ok);
#endif
