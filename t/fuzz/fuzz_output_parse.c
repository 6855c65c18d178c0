/* libFuzzer: the output parser (srt/output_parse.h) on any text. The first byte picks the tool format,
 * the reasoning parser, think_open and a piece size; the text is then fed whole and in pieces, and the
 * two event streams (consecutive bytes of one kind merged) must be equal: what makes streamed deltas
 * join to the non-streamed answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srt/output_parse.h"

typedef struct {
    unsigned char *buf;
    size_t len, cap;
    int last;
} out;

static int sink(void *user, srt_out_event ev, const char *s, size_t n)
{
    out *o = user;

    if (o->len + n + 2 > o->cap)
        abort();                  /* far more out than came in: a parser bug */
    if ((int)ev != o->last || ev == SRT_OUT_CALL_BEGIN) {
        o->buf[o->len++] = 0xff;  /* a new event */
        o->buf[o->len++] = (unsigned char)ev;
        o->last = (int)ev;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return SRT_OK;
}

static void run(srt_tool_format f, srt_reasoning_format r, int think_open, const char *t, size_t len,
                size_t step, out *o)
{
    srt_outparse p;

    o->len = 0;
    o->last = -1;
    srt_outparse_init(&p, f, r, think_open);
    for (size_t n = 0; step && n < len; n += step)
        srt_outparse_feed(&p, t, n, 0, sink, o);
    srt_outparse_feed(&p, t, len, 1, sink, o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    srt_tool_format f = (srt_tool_format)(data[0] & 3);
    srt_reasoning_format r = (srt_reasoning_format)((data[0] >> 2) % 3);
    int think_open = (data[0] >> 4) & 1;
    size_t step = 1 + ((data[0] >> 5) & 7);
    const char *t = (const char *)data + 1;
    size_t len = size - 1, cap = 8 * len + 256;
    out whole = { malloc(cap), 0, cap, -1 }, parts = { malloc(cap), 0, cap, -1 };

    if (whole.buf == NULL || parts.buf == NULL)
        abort();
    run(f, r, think_open, t, len, 0, &whole);
    run(f, r, think_open, t, len, step, &parts);
    if (whole.len != parts.len || memcmp(whole.buf, parts.buf, whole.len) != 0)
        abort();
    free(whole.buf);
    free(parts.buf);
    return 0;
}
