/* Splits a chat model's generated text into reasoning, content and tool calls, incrementally, so that a
 * stream of deltas and the whole answer come from the same decisions (the deltas joined equal the
 * non-streamed message by construction).
 *
 * Reasoning (srt_reasoning_parser): a <think>...</think> block at the start of the output is reasoning.
 *   QWEN3        the output may open it; the prompt may have opened it already (think_open).
 *   DEEPSEEK_R1  the output starts inside it (the template opens it), an opening tag is skipped;
 *                reasoning runs to </think> or to the end.
 *   Whitespace after </think> is dropped; the reasoning itself is kept byte for byte.
 *
 * Tool calls (srt_tool_call_parser), after the reasoning:
 *   HERMES   <tool_call>{"name": N, "arguments": {...}}</tool_call>, anywhere, repeated
 *   LLAMA3   {"name": N, "parameters": {...}} at the start of the content or after <|python_tag|>,
 *            several separated by ';'
 *   MISTRAL  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...], or the bare array at the start of
 *            the content (the tokenizer's [TOOL_CALLS] is a special token the detokenizer drops)
 *   DEEPSEEK_V3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
 *            <｜tool▁call▁end｜>, further calls each in their own begin/end pair, then
 *            <｜tool▁calls▁end｜>; anywhere in the content
 *   PYTHONIC [f(a="x", b=1), g()] at the start of the content (Llama 3.2/4), optionally inside
 *            <|python_start|> ... <|python_end|>; the arguments are Python literals (str, int,
 *            float, True/False/None, lists, dicts), converted to JSON; a call is reported whole
 *   "arguments" and "parameters" are both accepted in every JSON format. When "name" comes first and the
 *   arguments are an object, the call is reported as soon as its name is known and the arguments are
 *   passed through as they are generated (their raw text is the call's arguments string); otherwise
 *   the call object is held until complete, parsed, and its arguments re-serialized. A block that is
 *   not a call after all stays content. Whitespace next to calls is dropped; without calls the content
 *   is the text byte for byte.
 *
 * Usage: srt_outparse_init once, then srt_outparse_feed with the whole text generated so far (it only
 * grows) each time more is known, done = 1 the last time. Events are delivered in order through the
 * sink; their bytes are valid during the call only. */
#ifndef SRT_OUTPUT_PARSE_H
#define SRT_OUTPUT_PARSE_H

#include <stddef.h>

#include "srt/common.h"

typedef enum {
    SRT_TOOLS_OFF = 0,
    SRT_TOOLS_HERMES,
    SRT_TOOLS_LLAMA3,
    SRT_TOOLS_MISTRAL,
    SRT_TOOLS_DEEPSEEK_V3,
    SRT_TOOLS_PYTHONIC
} srt_tool_format;

typedef enum {
    SRT_REASONING_OFF = 0,
    SRT_REASONING_QWEN3,
    SRT_REASONING_DEEPSEEK_R1
} srt_reasoning_format;

typedef enum {
    SRT_OUT_REASONING,      /* bytes of reasoning_content */
    SRT_OUT_CONTENT,        /* bytes of content */
    SRT_OUT_CALL_BEGIN,     /* a new call; the bytes are its name */
    SRT_OUT_CALL_ARGS       /* bytes of the current call's arguments string */
} srt_out_event;

/* Returns SRT_OK, or SRT_ERROR to stop the feed (which then returns SRT_ERROR). */
typedef int (*srt_out_sink)(void *user, srt_out_event ev, const char *s, size_t n);

typedef struct srt_outparse {
    srt_tool_format      tools;
    srt_reasoning_format reasoning;
    int                  state;
    int                  think_open;   /* the prompt ended inside <think> */
    int                  skip_ws;      /* drop whitespace before the next content */
    int                  depth;        /* JSON nesting while passing arguments through */
    int                  in_str, esc;
    size_t               pos;          /* bytes of the text decided so far */
    size_t               ws;           /* start of held trailing whitespace (content) */
    size_t               block;        /* where the current call block began (for a revert) */
    size_t               n_calls;
    size_t               max_calls;    /* srt_outparse_limit; 0: any number */
    size_t               end_at;       /* where the text ends once max_calls are complete */
    size_t               horizon;      /* the text seen when a block was last found no call */
} srt_outparse;

SRT_API void srt_outparse_init(srt_outparse *p, srt_tool_format tools, srt_reasoning_format reasoning,
                               int think_open);
SRT_API int  srt_outparse_feed(srt_outparse *p, const char *text, size_t len, int done, srt_out_sink sink,
                               void *user);

/* At most max_calls calls (parallel_tool_calls false: 1): once that many are complete (with their
 * closing tag where the format has one), the parser ignores the rest of the text, and
 * srt_outparse_limit_reached gives 1 and *end, the length the text may be cut to (generation can end
 * there: feeding the text cut to *end with done = 1 gives the same events). Call after init. */
SRT_API void srt_outparse_limit(srt_outparse *p, size_t max_calls);
SRT_API int  srt_outparse_limit_reached(const srt_outparse *p, size_t *end);

/* 1 while the parser may still produce reasoning (before or inside the think block). */
SRT_API int srt_outparse_in_reasoning(const srt_outparse *p);

/* The tool-call format a chat template teaches, from its source: HERMES for <tool_call>, MISTRAL for
 * [TOOL_CALLS], LLAMA3 for <|python_tag|> or ipython, DEEPSEEK_V3 for <｜tool▁sep｜> with a ```json
 * fence (DeepSeek V3's and R1's templates; V3.1's have no fence and another format: not this one),
 * PYTHONIC for <|python_start|> (Llama 4) or a template that asks for "[func_name1(params_name1=
 * params_value1" (Llama 3.2's pythonic templates); *unambiguous = 0 (and HERMES) when the text names
 * none of them or more than one. */
SRT_API srt_tool_format srt_tool_format_detect(const char *tmpl_src, int *unambiguous);

/* The GBNF text gbnf (one JSON schema's grammar, srt_grammar_json_schema_to_gbnf) with every rule name
 * given prefix (root becomes <prefix>root), so that the grammars of several schemas can live in one
 * tool-call grammar. Flags: PYTHON_LITERALS writes the literals true, false and null as Python's True,
 * False and None (pythonic calls); the rules every such grammar has alike (ws, basic_*) keep their
 * names with SHARED_KEEP (the first piece) and lose their definitions too with SHARED_DROP (the others),
 * so that they are defined once. Returns malloc'ed text, NULL when out of memory. */
#define SRT_GBNF_PYTHON_LITERALS 1
#define SRT_GBNF_SHARED_KEEP     2
#define SRT_GBNF_SHARED_DROP     4
SRT_API char *srt_gbnf_prefix_rules(const char *gbnf, const char *prefix, int flags);

/* 1 when a rendered prompt ends inside an open <think> (whitespace after the tag allowed). */
SRT_API int srt_prompt_think_open(const char *prompt, size_t len);

#endif
