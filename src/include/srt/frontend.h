/* A model's front end: the tokenizer, the chat template and the BOS/EOS strings a template
 * renders with, loaded from a model path one way for every caller (the nginx worker, the
 * prefix-affinity front, srt-generate).
 *
 *   directory   tokenizer.json (+ tokenizer_config.json when present: added tokens, chat
 *               template, bos/eos strings)
 *   .gguf file  the tokenizer and template in its metadata
 *
 * bos_token/eos_token are tokenizer_config.json's when it names them (what HF's
 * apply_chat_template passes), else the tokenizer's own. The template is template_file when
 * given (srt_chat_template), else the tokenizer's; a model without one has tmpl NULL. */
#ifndef SRT_FRONTEND_H
#define SRT_FRONTEND_H

#include <yajl/yajl_gen.h>

#include "srt/chat_template.h"
#include "srt/common.h"
#include "srt/output_parse.h"
#include "srt/tokenizer.h"

typedef struct srt_frontend {
    srt_tokenizer     *tok;
    srt_chat_template *tmpl;        /* NULL: the model has no chat template */
    char              *bos_token;   /* malloc'd; NULL when unknown */
    char              *eos_token;
    srt_tool_format    tool_format; /* the tool-call format the template teaches (HERMES when unsure) */
    int                tool_format_sure;
} srt_frontend;

/* Fills fe (zeroed first); on error frees what it made. template_file may be NULL or "". */
SRT_API int  srt_frontend_load(const char *model_path, const char *template_file, srt_frontend *fe,
                               srt_err *err);
SRT_API void srt_frontend_free(srt_frontend *fe);

/* The keys of a chat template's context that are the same for every request, as HF's
 * apply_chat_template passes them: add_generation_prompt (true), bos_token, eos_token (""
 * when NULL). g is inside the context's open map, after "messages"; the caller adds "tools"
 * and "documents" and closes it. Returns yajl_gen's status. */
SRT_API yajl_gen_status srt_chat_context_gen_common(yajl_gen g, const char *bos_token,
                                                    const char *eos_token);

#endif
