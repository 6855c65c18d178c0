/* The engine's one whole-file reader (see srt/common.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt/common.h"

/* Grows the buffer as it reads rather than trusting the size the file reports: /proc files
 * and pipes say 0, and a file may grow between a stat and the read. */
int srt_read_file(const char *path, size_t max, char **out, size_t *out_len, srt_err *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t n = 0, cap = 0;

    *out = NULL;
    if (f == NULL)
        return srt_err_open(err, path, errno);
    for (;;) {
        if (n == cap) {
            size_t want = cap ? cap * 2 : 8192;
            if (want > max + 1)
                want = max + 1;
            char *grown = want > cap ? realloc(buf, want + 1) : NULL;   /* + 1: the NUL */
            if (grown == NULL && want > cap) {
                srt_err_set(err, "%s: out of memory", path);
                goto fail;
            }
            if (grown) {
                buf = grown;
                cap = want;
            }
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > max) {
            srt_err_set(err, "%s: larger than %zu bytes", path, max);
            goto fail;
        }
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        srt_err_set(err, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    if (buf == NULL && (buf = malloc(1)) == NULL)
        return srt_err_set(err, "%s: out of memory", path);
    buf[n] = '\0';
    *out = buf;
    if (out_len)
        *out_len = n;
    return SRT_OK;
fail:
    fclose(f);
    free(buf);
    return SRT_ERROR;
}
