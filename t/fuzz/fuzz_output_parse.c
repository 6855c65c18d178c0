/* libFuzzer: the output parser (srt/output_parse.h) on any text. The first byte picks the tool format,
 * the reasoning parser, think_open and a piece size; the text is then fed whole and in pieces, and the
 * two event streams (consecutive bytes of one kind merged) must be equal: what makes streamed deltas
 * join to the non-streamed answer. Then the same under a limit of one call (parallel_tool_calls
 * false): where the pieces reach the limit, the text cut there and fed whole must give those events
 * too (what lets generation end at the first call). */
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

/* Fed whole (step 0) or in pieces; *cut: where the limit was reached while feeding in pieces. */
static void run(srt_tool_format f, srt_reasoning_format r, int think_open, const char *t, size_t len,
                size_t step, size_t max_calls, out *o, size_t *cut)
{
    srt_outparse p;
    size_t end;

    o->len = 0;
    o->last = -1;
    *cut = SIZE_MAX;
    srt_outparse_init(&p, f, r, think_open);
    srt_outparse_limit(&p, max_calls);
    for (size_t n = 0; step && n < len && *cut == SIZE_MAX; n += step) {
        srt_outparse_feed(&p, t, n, 0, sink, o);
        if (srt_outparse_limit_reached(&p, &end)) {
            if (end > n)
                abort();          /* the limit is reached inside the text it has seen */
            *cut = end;
        }
    }
    srt_outparse_feed(&p, t, len, 1, sink, o);
}

static void same(const out *a, const out *b)
{
    if (a->len != b->len || memcmp(a->buf, b->buf, a->len) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    srt_tool_format f = (srt_tool_format)(data[0] % 6);
    srt_reasoning_format r = (srt_reasoning_format)(data[0] / 6 % 3);
    int think_open = data[0] / 18 % 2;
    size_t step = 1 + data[0] / 36 % 7, cut, cut2;
    const char *t = (const char *)data + 1;
    size_t len = size - 1, cap = 8 * len + 256;
    out whole = { malloc(cap), 0, cap, -1 }, parts = { malloc(cap), 0, cap, -1 };

    if (whole.buf == NULL || parts.buf == NULL)
        abort();
    run(f, r, think_open, t, len, 0, 0, &whole, &cut);
    run(f, r, think_open, t, len, step, 0, &parts, &cut);
    same(&whole, &parts);

    run(f, r, think_open, t, len, step, 1, &parts, &cut);
    run(f, r, think_open, t, len, 0, 1, &whole, &cut2);
    same(&whole, &parts);
    if (cut != SIZE_MAX) {
        run(f, r, think_open, t, cut, 0, 1, &whole, &cut2);
        same(&whole, &parts);
    }
    free(whole.buf);
    free(parts.buf);
    return 0;
}
