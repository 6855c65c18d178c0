/* Shared helpers for the hook tests: log capture, a fake module tree, temp files. */
#ifndef TEST_HOOKS_UTIL_H
#define TEST_HOOKS_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "srt/common.h"
#include "srt/module.h"
#include "hooks/registry.h"

/* ---- log capture ---- */
#define LOG_MAX 512
static char  log_lines[LOG_MAX][1100];
static int   log_levels[LOG_MAX];
static int   log_n;

static __attribute__((unused)) void log_sink(srt_log_level level, const char *msg, void *user)
{
    (void)user;
    if (log_n < LOG_MAX) {
        snprintf(log_lines[log_n], sizeof log_lines[0], "%s", msg);
        log_levels[log_n++] = level;
    }
}

static __attribute__((unused)) void log_clear(void) { log_n = 0; }

/* Number of captured lines equal to msg at this level. */
static __attribute__((unused)) int log_count(int level, const char *msg)
{
    int c = 0;
    for (int i = 0; i < log_n; i++)
        if (log_levels[i] == level && strcmp(log_lines[i], msg) == 0)
            c++;
    return c;
}

static __attribute__((unused)) int log_count_level(int level)
{
    int c = 0;
    for (int i = 0; i < log_n; i++)
        c += log_levels[i] == level;
    return c;
}

static __attribute__((unused)) void log_dump(void)
{
    for (int i = 0; i < log_n; i++)
        printf("#   log[%d] %s\n", log_levels[i], log_lines[i]);
}

/* ---- temp dir and files ---- */
static char tmpdir[256];

static __attribute__((unused)) void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/srt_hooks_test.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(1);
    }
}

static __attribute__((unused)) const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static __attribute__((unused)) const char *write_tmp(const char *name, const char *text)
{
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "w");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

static __attribute__((unused)) void rm_rf_tmpdir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup failed\n");
}

/* ---- views ---- */
static __attribute__((unused)) srt_tensor_view f32_view(float *data, int64_t rows, int64_t cols)
{
    srt_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = SRT_HOOK_DTYPE_F32;
    v.device = SRT_HOOK_DEVICE_CPU;
    v.ndim = 2;
    v.shape[0] = rows;
    v.shape[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    v.data = data;
    return v;
}

#endif
