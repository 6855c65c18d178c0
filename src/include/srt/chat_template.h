/* Chat templates: a Jinja-subset interpreter that renders a model's own chat_template byte-identical to
 * HF transformers' apply_chat_template (jinja2 ImmutableSandboxedEnvironment with trim_blocks,
 * lstrip_blocks, loopcontrols, the {% generation %} tag, and transformers' globals raise_exception,
 * strftime_now, namespace, dict and its tojson filter).
 *
 * Life cycle: compile once when the model loads (every construct the interpreter lacks is reported there,
 * naming the construct and its line), render per request (one arena per render, freed before returning).
 * A compiled template is read-only during rendering, so one template may be rendered from many threads. */
#ifndef SRT_CHAT_TEMPLATE_H
#define SRT_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"

typedef struct srt_chat_template srt_chat_template;

/* Compile template source (UTF-8, need not be NUL-terminated). On error *out is NULL and err says
 * "line N: ..." with the unsupported construct or the syntax problem. */
SRT_API int srt_chat_template_compile(const char *src, size_t len, srt_chat_template **out, srt_err *err);

SRT_API void srt_chat_template_free(srt_chat_template *t);

/* Render with a JSON object as the context, e.g.
 *   {"messages": [...], "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
 *    "tools": null, "documents": null, "enable_thinking": false, ...}
 * Every top-level key becomes a template variable. transformers always passes "tools" and "documents"
 * (null when absent): callers who want identical prompts should too. Like transformers, the renderer
 * offers a message's reasoning (given as reasoning_content, thinking or reasoning) under both
 * "reasoning_content" and "thinking", so raw request messages can be passed through unchanged.
 * On success *out is a malloc'd NUL-terminated string of *out_len bytes; release it with
 * srt_chat_template_free_output() (or free()). On error (bad JSON, the template's raise_exception, a type
 * error, an undefined value used as an object...) *out is NULL and err holds the message;
 * raise_exception(msg) yields exactly msg. strftime_now() reads the local time. */
SRT_API int srt_chat_template_render(const srt_chat_template *t, const char *context_json, size_t len,
                                     char **out, size_t *out_len, srt_err *err);

/* Same, with strftime_now() pinned to `now` (seconds since the epoch, formatted in UTC): tests and
 * reproducible prompts. */
SRT_API int srt_chat_template_render_at(const srt_chat_template *t, const char *context_json, size_t len,
                                        int64_t now, char **out, size_t *out_len, srt_err *err);

SRT_API void srt_chat_template_free_output(char *out);

/* Template source from a tokenizer_config.json document: "chat_template" as a string, or as a list of
 * {"name", "template"} objects, where `name` (NULL means "default") is picked. *out is malloc'd and
 * NUL-terminated. Fails with a clear message when the config has no chat template. */
SRT_API int srt_chat_template_from_tokenizer_config(const char *json, size_t len, const char *name,
                                                    char **out, size_t *out_len, srt_err *err);

/* Reads a template file as is (the srt_chat_template directive, HF's chat_template.jinja). */
SRT_API int srt_chat_template_read_file(const char *path, char **out, size_t *out_len, srt_err *err);

/* A special token's text from tokenizer_config.json ("bos_token", "eos_token", ...), given either as a
 * string or as an AddedToken object {"content": ...}. *out is malloc'd; SRT_ERROR when absent or null. */
SRT_API int srt_tokenizer_config_token(const char *json, size_t len, const char *key, char **out, srt_err *err);

#endif
