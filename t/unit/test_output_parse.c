/* Output parsing (srt/output_parse.h): reasoning, content and tool calls of each format come out as
 * expected, and feeding the text byte by byte gives exactly what feeding it whole gives (the promise
 * that streamed deltas join to the non-streamed message). */
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <string.h>

#include <stdlib.h>

#include "srt/grammar.h"
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

/* Fed in pieces of step bytes (0: whole), at most max_calls calls (0: any); *cut: where the limit was
 * reached while feeding in pieces (SIZE_MAX if never). */
static void run_limit(srt_tool_format f, srt_reasoning_format r, int think_open, const char *text, size_t len,
                      size_t step, size_t max_calls, collect *c, size_t *cut)
{
    srt_outparse p;
    size_t n, end;

    memset(c, 0, sizeof *c);
    c->last = -1;
    *cut = SIZE_MAX;
    srt_outparse_init(&p, f, r, think_open);
    srt_outparse_limit(&p, max_calls);
    if (step) {
        for (n = 0; n < len && *cut == SIZE_MAX; n += step) {
            srt_outparse_feed(&p, text, n, 0, sink, c);
            if (srt_outparse_limit_reached(&p, &end))
                *cut = end;
        }
    }
    srt_outparse_feed(&p, text, len, 1, sink, c);
    if (c->last >= 0)
        c->len += (size_t)snprintf(c->out + c->len, sizeof c->out - c->len, "]");
}

static void run(srt_tool_format f, srt_reasoning_format r, int think_open, const char *text, size_t step,
                collect *c)
{
    size_t cut;

    run_limit(f, r, think_open, text, strlen(text), step, 0, c, &cut);
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

/* parallel_tool_calls false: fed byte by byte (as tokens arrive), the parser says where the first call
 * ends (want_cut: the text's length there; SIZE_MAX: never), and the text cut there, fed whole, gives
 * the events want (which are also those of the whole text under the limit). */
static void check_one(srt_tool_format f, const char *text, size_t want_cut, const char *want)
{
    collect bytes, cutw, whole;
    size_t cut, cut2, len = strlen(text);
    char e1[512], e2[512], e3[4096];

    run_limit(f, SRT_REASONING_OFF, 0, text, len, 1, 1, &bytes, &cut);
    run_limit(f, SRT_REASONING_OFF, 0, text, cut == SIZE_MAX ? len : cut, 0, 1, &cutw, &cut2);
    run_limit(f, SRT_REASONING_OFF, 0, text, len, 0, 1, &whole, &cut2);
    tap_ok(cut == want_cut && strcmp(cutw.out, want) == 0 && strcmp(whole.out, want) == 0,
           "one call: %s -> stops at %zd, %s", esc(text, e1, sizeof e1), (ssize_t)want_cut, esc(want, e2, sizeof e2));
    if (cut != want_cut || strcmp(cutw.out, want) != 0 || strcmp(whole.out, want) != 0)
        tap_diag("stopped at %zd, cut %s, whole %s", (ssize_t)cut, esc(cutw.out, e3, sizeof e3), whole.out);
}

/* srt_gbnf_prefix_rules: a schema's grammar under a prefix, with Python's literals, inside a larger one */
static void check_prefix_rules(void)
{
    const char *schema = "{\"type\": \"object\", \"properties\": {\"b\": {\"type\": \"boolean\"}, "
                         "\"n\": {\"type\": \"null\"}, \"e\": {\"enum\": [\"true\", 2]}}, "
                         "\"required\": [\"b\", \"n\", \"e\"]}";
    const char *bytes[257];
    size_t lens[257];
    uint8_t special[257];
    char tok[256][2], *body = NULL, *pre, *pre2, *full;
    int32_t stop = 256;
    srt_grammar_vocab *v = NULL;
    srt_grammar *g = NULL;
    srt_err err;

    for (int i = 0; i < 256; i++) {
        tok[i][0] = (char)i;
        bytes[i] = tok[i];
        lens[i] = 1;
        special[i] = 0;
    }
    bytes[256] = "</s>";
    lens[256] = 4;
    special[256] = 1;
    if (srt_grammar_vocab_new(257, bytes, lens, special, &stop, 1, &v, &err) != SRT_OK
        || srt_grammar_json_schema_to_gbnf(schema, strlen(schema), NULL, &body, &err) != SRT_OK) {
        tap_ok(0, "prefix rules: setup: %s", err.msg);
        return;
    }
    /* two pieces: the first keeps the shared rules, the second uses them */
    pre = srt_gbnf_prefix_rules(body, "t0-p1-", SRT_GBNF_PYTHON_LITERALS | SRT_GBNF_SHARED_KEEP);
    pre2 = srt_gbnf_prefix_rules(body, "t1-", SRT_GBNF_PYTHON_LITERALS | SRT_GBNF_SHARED_DROP);
    full = malloc(strlen(pre) + strlen(pre2) + 64);
    sprintf(full, "root ::= \"f(\" t0-p1-root \")\" | \"g(\" t1-root \")\"\n%s%s", pre, pre2);
    tap_ok(strstr(pre, "t0-p1-root ::=") != NULL && strstr(pre, "\"True\"") && !strstr(pre, "\"true\"")
           && strstr(pre, "\nbasic_string ::=") && !strstr(pre2, "basic_string ::=") && strstr(pre2, " ws "),
           "prefix rules: root renamed, true written True, shared rules once");
    tap_ok(srt_grammar_compile_gbnf(v, full, strlen(full), &g, &err) == SRT_OK, "prefix rules: compiles (%s)",
           g ? "" : err.msg);
    if (g) {
        srt_grammar_matcher *m = srt_grammar_matcher_new(g);
        const char *s = "f({\"b\": True, \"n\": None, \"e\": \"true\"})";
        tap_ok(m && srt_grammar_matcher_accept_bytes(m, s, strlen(s)) && srt_grammar_matcher_can_end(m),
               "prefix rules: Python's literals accepted, the string \"true\" kept");
        srt_grammar_matcher_free(m);
        m = srt_grammar_matcher_new(g);
        tap_ok(m && !srt_grammar_matcher_accept_bytes(m, "f({\"b\": true", 13), "prefix rules: JSON's true refused");
        srt_grammar_matcher_free(m);
        m = srt_grammar_matcher_new(g);
        s = "g({\"b\": False, \"n\": None, \"e\": 2})";
        tap_ok(m && srt_grammar_matcher_accept_bytes(m, s, strlen(s)) && srt_grammar_matcher_can_end(m),
               "prefix rules: the second piece");
        srt_grammar_matcher_free(m);
        srt_grammar_free(g);
    }
    free(full);
    free(pre);
    free(pre2);
    free(body);
    srt_grammar_vocab_free(v);
}

int main(void)
{
    const srt_tool_format H = SRT_TOOLS_HERMES, L = SRT_TOOLS_LLAMA3, M = SRT_TOOLS_MISTRAL,
                          DS = SRT_TOOLS_DEEPSEEK_V3, P = SRT_TOOLS_PYTHONIC;
    const char *ds2 = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                      "{\"city\": \"Tokyo\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                      "search\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    const char *h2 = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                     "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
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

        /* DeepSeek V3 */
        { DS, O, 0, ds2, "C[Sure.]N[get_weather]A[{\"city\": \"Tokyo\"}]N[search]A[{}]" },
        { DS, O, 0, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": [1]}\n```"
                    "<｜tool▁call▁end｜><｜tool▁calls▁end｜>\nDone.", "N[f]A[{\"a\": [1]}]C[Done.]" },
        { DS, O, 0, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
          "C[<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜>]" },
        { DS, O, 0, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": ",
          "N[f]A[{\"a\": ]" },
        { DS, O, 0, "text ending in <｜tool▁call", "C[text ending in <｜tool▁call]" },

        /* pythonic */
        { P, O, 0, "[get_weather(city=\"Paris\", unit='celsius'), search(query=\"it's\", n=-2, x=1.5e3, y=1.)]",
          "N[get_weather]A[{\"city\": \"Paris\", \"unit\": \"celsius\"}]"
          "N[search]A[{\"query\": \"it's\", \"n\": -2, \"x\": 1.5e3, \"y\": 1.0}]" },
        { P, O, 0, " [f(a=True, b=None, c=[1, 'x\\n\"'], d={'k': False},)]",
          "N[f]A[{\"a\": true, \"b\": null, \"c\": [1, \"x\\n\\\"\"], \"d\": {\"k\": false}}]" },
        { P, O, 0, "<|python_start|>[g()]<|python_end|> done", "N[g]A[{}]C[done]" },
        { P, O, 0, "[1, 2] is a list", "C[[1, 2] is a list]" },
        { P, O, 0, "[f(1)] is positional", "C[[f(1)] is positional]" },
        { P, O, 0, "[f(a=x)]", "C[[f(a=x)]]" },
        { P, O, 0, "[f(a=\"unclosed)]", "C[[f(a=\"unclosed)]]" },
        { P, O, 0, "[f(a=1), nope]", "N[f]A[{\"a\": 1}]C[, nope]]" },
        { P, O, 0, "Call [f(a=1)] later", "C[Call [f(a=1)] later]" },

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

    /* parallel_tool_calls false: generation can end after the first complete call */
    check_one(H, h2, strlen(h2) / 2, "N[a]A[{}]");
    check_one(H, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\nmore", 42, "N[a]A[{}]");
    check_one(H, "no call </tool_call>", SIZE_MAX, "C[no call </tool_call>]");
    check_one(L, "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}", 31, "N[a]A[{}]");
    check_one(M, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"k\": 1}}, {\"name\": \"b\"}]", 49,
              "N[a]A[{\"k\": 1}]");
    check_one(DS, ds2, strstr(ds2, "\n<｜tool▁call▁begin｜>") - ds2, "C[Sure.]N[get_weather]A[{\"city\": \"Tokyo\"}]");
    check_one(P, "[f(a=1), g(b=2)]", 7, "N[f]A[{\"a\": 1}]");

    /* detection from the template text */
    tap_ok(srt_tool_format_detect("{{ '<tool_call>' }}", &unamb) == H && unamb, "detect: hermes");
    tap_ok(srt_tool_format_detect("{{ '[TOOL_CALLS]' }}", &unamb) == M && unamb, "detect: mistral");
    tap_ok(srt_tool_format_detect("{{ '<|python_tag|>' }} ipython", &unamb) == L && unamb, "detect: llama3");
    tap_ok(srt_tool_format_detect("{{ messages }}", &unamb) == H && !unamb, "detect: none -> hermes, ambiguous");
    tap_ok(srt_tool_format_detect("<tool_call> [TOOL_CALLS]", &unamb) == H && !unamb, "detect: two -> ambiguous");
    tap_ok(srt_tool_format_detect("'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + name + '\\n```json'",
                                  &unamb) == DS && unamb, "detect: deepseek v3");
    tap_ok(srt_tool_format_detect("'<｜tool▁call▁begin｜>' + name + '<｜tool▁sep｜>' + arguments", &unamb) == H
           && !unamb, "detect: deepseek v3.1 (no fence) is not v3");
    tap_ok(srt_tool_format_detect("ipython <|python_start|>", &unamb) == P && unamb, "detect: pythonic (llama 4)");
    tap_ok(srt_tool_format_detect("[func_name1(params_name1=params_value1", &unamb) == P && unamb,
           "detect: pythonic (llama 3.2)");
    tap_ok(srt_prompt_think_open("<|im_start|>assistant\n<think>\n", 30) == 1
           && srt_prompt_think_open("<think>\n\n</think>\n\n", 19) == 0, "a prompt that opened <think>");

    check_prefix_rules();

    printf("1..%d\n", tap_count);
    return tap_failed ? 1 : 0;
}
