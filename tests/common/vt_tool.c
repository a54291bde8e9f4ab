/* Test harness: running the tools from the build directory (end-to-end suites in tests/tools/). */
#include "vkh2o_test.h"

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

extern char** environ;

char* vt_slurp(const char* path)
{
    FILE* f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

int vt_run_tool(const char* tool, const char* const* args)
{
    const char* bin = getenv("VKH2O_BUILD_DIR");
    char exe[1024];
    snprintf(exe, sizeof exe, "%s/%s", bin ? bin : ".", tool);
    const char* argv[64];
    int n = 0;
    argv[n++] = exe;
    for (int i = 0; args[i] && n < 62; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, vt_scratch_path("stdout.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, vt_scratch_path("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, exe, &fa, NULL, (char* const*)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int status = 0;
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}
