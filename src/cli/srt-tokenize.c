/* srt-tokenize: encode or decode with a tokenizer.json or GGUF tokenizer.
 *
 *   srt-tokenize [--gguf] TOKENIZER [--config tokenizer_config.json] [--special] [--add-special]
 *                [--lines FILE] [--repeat N] [--bench] [--decode] [TEXT]
 *
 * Prints ids (space separated) per input; --lines reads one JSON-free raw line per input (a \n ends a line);
 * --bench prints "bytes seconds MB/s" for encoding the inputs --repeat times instead of the ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "srt/tokenizer.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *config = NULL, *lines = NULL, *text = NULL;
    int gguf = 0, bench = 0, decode = 0, repeat = 1;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gguf"))
            gguf = 1;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--special"))
            flags |= SRT_TOK_PARSE_SPECIAL;
        else if (!strcmp(argv[i], "--add-special"))
            flags |= SRT_TOK_ADD_SPECIAL;
        else if (!strcmp(argv[i], "--lines") && i + 1 < argc)
            lines = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bench"))
            bench = 1;
        else if (!strcmp(argv[i], "--decode"))
            decode = 1;
        else if (!path)
            path = argv[i];
        else
            text = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: srt-tokenize [--gguf] TOKENIZER [--config CFG] [--special] [--add-special] "
                        "[--lines FILE] [--repeat N] [--bench] [--decode] [TEXT]\n");
        return 2;
    }
    srt_err err = {{0}};
    srt_tokenizer *tok = NULL;
    double t0 = now();
    int rc = gguf ? srt_tokenizer_from_gguf(path, &tok, &err) : srt_tokenizer_load_json(path, config, &tok, &err);
    if (rc) {
        fprintf(stderr, "srt-tokenize: %s\n", err.msg);
        return 1;
    }
    double t_load = now() - t0;
    if (decode) {
        /* TEXT is a list of ids */
        int32_t ids[65536];
        size_t n = 0;
        for (const char *p = text ? text : ""; *p && n < 65536;) {
            char *end = NULL;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            ids[n++] = (int32_t)v;
            p = end;
        }
        char *out;
        size_t len;
        if (srt_tokenizer_decode(tok, ids, n, 0, &out, &len, &err)) {
            fprintf(stderr, "srt-tokenize: %s\n", err.msg);
            return 1;
        }
        fwrite(out, 1, len, stdout);
        printf("\n");
        free(out);
        srt_tokenizer_free(tok);
        return 0;
    }
    char *buf = NULL;
    size_t blen = 0;
    if (lines) {
        srt_err rerr;
        if (srt_read_file(lines, (size_t)1 << 31, &buf, &blen, &rerr) != SRT_OK) {
            fprintf(stderr, "srt-tokenize: %s\n", rerr.msg);
            return 1;
        }
    } else {
        buf = strdup(text ? text : "");
        blen = strlen(buf);
    }
    size_t total = 0, n_ids = 0;
    t0 = now();
    double c0 = cpu_now();
    for (int r = 0; r < repeat; r++) {
        size_t pos = 0;
        while (pos < blen || (!lines && pos == 0)) {
            size_t end = pos;
            if (lines)
                while (end < blen && buf[end] != '\n')
                    end++;
            else
                end = blen;
            int32_t *ids;
            size_t n;
            if (srt_tokenizer_encode_alloc(tok, buf + pos, end - pos, flags, &ids, &n, &err)) {
                fprintf(stderr, "srt-tokenize: %s\n", err.msg);
                return 1;
            }
            total += end - pos;
            n_ids += n;
            if (!bench) {
                for (size_t i = 0; i < n; i++)
                    printf(i ? " %d" : "%d", ids[i]);
                printf("\n");
            }
            free(ids);
            pos = end + 1;
            if (!lines)
                break;
        }
    }
    double dt = now() - t0, dc = cpu_now() - c0;
    if (bench)
        printf("load_s %.4f bytes %zu ids %zu seconds %.4f cpu_seconds %.4f MB/s %.2f\n", t_load, total, n_ids, dt,
               dc, total / dt / 1e6);
    free(buf);
    srt_tokenizer_free(tok);
    return 0;
}
