/* vkh2o-demo without --weights: the synthetic Kimi-shaped shard, made once with vkh2o-mkshard
 * and kept in the cache directory. */
#include "cli.h"
#include "demo.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

static int mkdir_p(const char* path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char* p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static bool file_exists(const char* p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Makes (once) a synthetic Kimi-shaped shard with the vkh2o-mkshard beside this program. */
bool synthetic_shard(const char* cache_dir, bool quiet, char* path, size_t cap)
{
    char dir[4096];
    const char* env;
    if (cache_dir)
        snprintf(dir, sizeof dir, "%s", cache_dir);
    else if ((env = getenv("VKH2O_CACHE_DIR")) && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        snprintf(dir, sizeof dir, "%s/vkh2o", env);
    else if ((env = getenv("HOME")) && *env)
        snprintf(dir, sizeof dir, "%s/.cache/vkh2o", env);
    else
        snprintf(dir, sizeof dir, "/tmp/vkh2o-cache");
    size_t dl = strlen(dir);
    if (dl + 64 >= cap)
        return cli_fail(0, "vkh2o-demo: cache directory path too long\n");
    /* named for the preset its config.json carries (an older cache held other values) */
    strcat(dir, "/kimi-k2.6-synthetic-bf16");
    snprintf(path, cap, "%s/model-00001-of-000064.safetensors", dir);
    if (file_exists(path)) {
        if (!quiet)
            printf("weights:       SYNTHETIC Kimi-shaped bf16 shard (vkh2o-mkshard, cached): %s\n", path);
        return true;
    }
    if (mkdir_p(dir) != 0)
        return cli_fail(0, "vkh2o-demo: cannot create the cache directory %s: %s\n", dir, strerror(errno));
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 32);
    if (n <= 0)
        return cli_fail(0, "vkh2o-demo: cannot locate vkh2o-mkshard (readlink /proc/self/exe failed)\n");
    exe[n] = 0;
    char* slash = strrchr(exe, '/');
    snprintf(slash ? slash + 1 : exe, sizeof exe - (size_t)(slash ? slash + 1 - exe : 0), "vkh2o-mkshard");
    if (!quiet)
        printf("weights:       none given: making a SYNTHETIC Kimi-shaped bf16 shard once with %s\n"
               "               in %s (random weights, real tensor names and shapes; not real Kimi weights)\n", exe, dir);
    fflush(stdout);
    char* argv[] = { exe, "--out", path, "--preset", "kimi", "--dtype", "bf16", "--seed", "0",
                     quiet ? "--quiet" : NULL, NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
    if (rc != 0)
        return cli_fail(0, "vkh2o-demo: cannot run %s: %s\n", exe, strerror(rc));
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return cli_fail(0, "vkh2o-demo: %s failed (status %d)\n", exe, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return file_exists(path);
}
