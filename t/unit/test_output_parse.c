/* Output parsing (srt/output_parse.h): reasoning, content and tool calls of each format come out as
 * expected, and feeding the text byte by byte gives exactly what feeding it whole gives (the promise
 * that streamed deltas join to the non-streamed message). */
#include <stdio.h>
#include <string.h>

#include "srt/output_parse.h"
#include "tap.h"

typedef struct {
    char out[4096];     /* R[...] C[...] N[...] A[...], consecutive same events merged */
    size_t len;
    int last;
} collect;

static int sink(void *user, srt_out_event ev, const char *s, size_t n)
{
    collect *c = user;
    static const char tags[] = "RCNA";

    if ((int)ev != c->last || ev == SRT_OUT_CALL_BEGIN) {
        if (c->last >= 0)
            c->len += (size_t)snprintf(c->out + c->len, sizeof c->out - c->len, "]");
        c->len += (size_t)snprintf(c->out + c->len, sizeof c->out - c->len, "%c[", tags[ev]);
        c->last = (int)ev;
    }
    c->len += (size_t)snprintf(c->out + c->len, sizeof c->out - c->len, "%.*s", (int)n, s);
    return SRT_OK;
}

static void run(srt_tool_format f, srt_reasoning_format r, int think_open, const char *text, size_t step,
                collect *c)
{
    srt_outparse p;
    size_t len = strlen(text), n;

    memset(c, 0, sizeof *c);
    c->last = -1;
    srt_outparse_init(&p, f, r, think_open);
    if (step) {
        for (n = 0; n < len; n += step)
            srt_outparse_feed(&p, text, n, 0, sink, c);
    }
    srt_outparse_feed(&p, text, len, 1, sink, c);
    if (c->last >= 0)
        c->len += (size_t)snprintf(c->out + c->len, sizeof c->out - c->len, "]");
}

/* s with control characters escaped, for a one-line TAP description */
static const char *esc(const char *s, char *buf, size_t cap)
{
    size_t n = 0;

    for (; *s && n + 3 < cap; s++) {
        if (*s == '\n' || *s == '\r' || *s == '\t') {
            buf[n++] = '\\';
            buf[n++] = *s == '\n' ? 'n' : *s == '\r' ? 'r' : 't';
        } else {
            buf[n++] = *s;
        }
    }
    buf[n] = '\0';
    return buf;
}

static void check(srt_tool_format f, srt_reasoning_format r, int think_open, const char *text, const char *want)
{
    collect whole, bytes, threes;
    char e1[512], e2[512], e3[4096], e4[4096];

    run(f, r, think_open, text, 0, &whole);
    run(f, r, think_open, text, 1, &bytes);
    run(f, r, think_open, text, 3, &threes);
    tap_ok(strcmp(whole.out, want) == 0, "%s -> %s", esc(text, e1, sizeof e1), esc(want, e2, sizeof e2));
    if (strcmp(whole.out, want) != 0)
        tap_diag("got %s", esc(whole.out, e3, sizeof e3));
    tap_ok(strcmp(bytes.out, whole.out) == 0 && strcmp(threes.out, whole.out) == 0,
           "  fed in pieces: the same (%s | %s)", esc(bytes.out, e3, sizeof e3), esc(threes.out, e4, sizeof e4));
}

/* one case: the formats, whether the prompt left <think> open, the model's text, what comes out */
typedef struct {
    srt_tool_format f;
    srt_reasoning_format r;
    int think_open;
    const char *text, *want;
} parse_case;

int main(void)
{
    const srt_tool_format H = SRT_TOOLS_HERMES, L = SRT_TOOLS_LLAMA3, M = SRT_TOOLS_MISTRAL;
    const srt_reasoning_format Q = SRT_REASONING_QWEN3, D = SRT_REASONING_DEEPSEEK_R1, O = SRT_REASONING_OFF;
    const parse_case cases[] = {
        /* no tools, no reasoning: the text byte for byte */
        { SRT_TOOLS_OFF, O, 0, "  hello <tool_call>\n", "C[  hello <tool_call>\n]" },
        { H, O, 0, "plain text \n", "C[plain text \n]" },

        /* Hermes */
        { H, O, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "N[get_weather]A[{\"city\": \"Paris\"}]" },
        { H, O, 0, "Let me look.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"}{\\\"\"}}\n</tool_call>\n"
                   "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\nDone.",
          "C[Let me look.]N[a]A[{\"x\": \"}{\\\"\"}]N[b]A[{}]C[Done.]" },
        { H, O, 0, "<tool_call>{\"arguments\": {\"q\": [1, 2]}, \"name\": \"s\"}</tool_call>",
          "N[s]A[{\"q\": [1, 2]}]" },
        { H, O, 0, "<tool_call>{\"name\": \"s\", \"arguments\": \"{\\\"q\\\": 1}\"}</tool_call>",
          "N[s]A[{\"q\": 1}]" },
        { H, O, 0, "I would use <tool_call>{\"nam\": 1}</tool_call> here",
          "C[I would use <tool_call>{\"nam\": 1}</tool_call> here]" },
        { H, O, 0, "<tool_call>not json", "C[<tool_call>not json]" },
        { H, O, 0, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1", "N[f]A[{\"a\": 1]" },
        { H, O, 0, "text ending in <tool_c", "C[text ending in <tool_c]" },
        /* found by fuzz_output_parse: a block that is no call, then a call */
        { H, O, 0, "a <tool_call>2 b <tool_call>{\"name\": \"s\"}</tool_call>",
          "C[a <tool_call>2 b]N[s]A[{}]" },

        /* Llama 3.1 JSON */
        { L, O, 0, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
          "N[get_weather]A[{\"city\": \"Oslo\"}]" },
        { L, O, 0, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": 2}}",
          "N[a]A[{}]N[b]A[{\"k\": 2}]" },
        { L, O, 0, "{not a call} and more", "C[{not a call} and more]" },
        { L, O, 0, "The JSON {\"name\": \"x\", \"parameters\": {}} is mentioned",
          "C[The JSON {\"name\": \"x\", \"parameters\": {}} is mentioned]" },

        /* Mistral */
        { M, O, 0, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"v\": true}}, {\"name\": \"b\", \"arguments\": {}}]",
          "N[a]A[{\"v\": true}]N[b]A[{}]" },
        { M, O, 0, "[{\"name\": \"a\", \"arguments\": {}}]", "N[a]A[{}]" },
        { M, O, 0, "[1] is a citation", "C[[1] is a citation]" },

        /* reasoning */
        { H, Q, 0, "<think>\nhmm\n</think>\n\nThe answer.", "R[\nhmm\n]C[The answer.]" },
        { H, Q, 0, "No thinking here.", "C[No thinking here.]" },
        { H, Q, 1, "still thinking</think>\n\nok", "R[still thinking]C[ok]" },
        { H, D, 0, "pondering</think>answer", "R[pondering]C[answer]" },
        { H, D, 0, "<think>pondering</think>answer", "R[pondering]C[answer]" },
        { SRT_TOOLS_OFF, D, 0, "never closed", "R[never closed]" },
        { H, Q, 0, "<think>call it</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
          "R[call it]N[f]A[{}]" },
        { H, Q, 0, "<think>x</think> <tool_call>\n</think>", "R[x]C[<tool_call>\n</think>]" },
    };
    int unamb;

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(cases[i].f, cases[i].r, cases[i].think_open, cases[i].text, cases[i].want);

    /* detection from the template text */
    tap_ok(srt_tool_format_detect("{{ '<tool_call>' }}", &unamb) == H && unamb, "detect: hermes");
    tap_ok(srt_tool_format_detect("{{ '[TOOL_CALLS]' }}", &unamb) == M && unamb, "detect: mistral");
    tap_ok(srt_tool_format_detect("{{ '<|python_tag|>' }} ipython", &unamb) == L && unamb, "detect: llama3");
    tap_ok(srt_tool_format_detect("{{ messages }}", &unamb) == H && !unamb, "detect: none -> hermes, ambiguous");
    tap_ok(srt_tool_format_detect("<tool_call> [TOOL_CALLS]", &unamb) == H && !unamb, "detect: two -> ambiguous");
    tap_ok(srt_prompt_think_open("<|im_start|>assistant\n<think>\n", 30) == 1
           && srt_prompt_think_open("<think>\n\n</think>\n\n", 19) == 0, "a prompt that opened <think>");

    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}
