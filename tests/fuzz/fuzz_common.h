/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c, built with -DVKH2O_FUZZ=ON): the
 * readers take paths, so each input is written to a file in a per-process scratch directory
 * (under $VKH2O_FUZZ_DIR, else /dev/shm when there is one: no disk traffic) and read back through the public API.
 * A contract a target checks beyond "no sanitizer report" fails with fuzz_fail(), which
 * aborts so that libFuzzer keeps the input as a crash. */
#ifndef VKH2O_FUZZ_COMMON_H
#define VKH2O_FUZZ_COMMON_H

#include "vkh2o.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A harness function whose loops need no coverage feedback (per-element reference checks):
 * no SanitizerCoverage callbacks in it (ASan and UBSan stay); not inlined, where the caller's
 * instrumentation would cover it again. */
#define FUZZ_NOCOV __attribute__((no_sanitize("coverage"), noinline))

static char fuzz_dir_buf[256];
static volatile uint8_t fuzz_sink;   /* bytes read from tensors go here, so the reads stay */

static const char* fuzz_dir(void)
{
    if (!fuzz_dir_buf[0]) {
        /* VKH2O_FUZZ_DIR (scripts/vkh2o.sh fuzz sets it and removes it afterwards), else /dev/shm */
        const char* base = getenv("VKH2O_FUZZ_DIR");
        if (!base)
            base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        snprintf(fuzz_dir_buf, sizeof fuzz_dir_buf, "%s/vkh2o-fuzz.XXXXXX", base);
        if (!mkdtemp(fuzz_dir_buf)) {
            perror("vkh2o fuzz: mkdtemp");
            abort();
        }
    }
    return fuzz_dir_buf;
}

/* <scratch>/<name>, holding exactly data[0, size). */
static inline const char* fuzz_file(const char* name, const void* data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror(path);
        abort();
    }
    const char* p = data;
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, p + done, size - done);
        if (w <= 0) {
            perror(path);
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
    return path;
}

#define fuzz_fail(...)                                                                                                 \
    do {                                                                                                               \
        fprintf(stderr, "vkh2o fuzz: contract broken at %s:%d: ", __FILE__, __LINE__);                                \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fputc('\n', stderr);                                                                                           \
        abort();                                                                                                       \
    } while (0)

/* A failure must say something, and the code in the error must be the one returned. */
static void fuzz_check_error(vkh2o_result r, const vkh2o_error* e, const char* path)
{
    if (r >= 0)
        fuzz_fail("result %d is not a failure", (int)r);
    if (e->code != r)
        fuzz_fail("error code %d differs from result %d", (int)e->code, (int)r);
    if (!e->message[0] || !memchr(e->message, '\0', sizeof e->message))
        fuzz_fail("empty or unterminated message");
    if (path && !strstr(e->message, path))
        fuzz_fail("message \"%s\" does not name %s", e->message, path);
}

#endif
