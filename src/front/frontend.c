/* Loading a model's front end (see srt/frontend.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srt/frontend.h"

/* tokenizer_config.json's bos_token / eos_token (strings or {"content": ...}); absent is
 * not an error: the tokenizer's own then stand. */
static void config_tokens(const char *cfg_path, srt_frontend *fe)
{
    char *json;
    size_t len;
    srt_err ignored;

    if (srt_read_file(cfg_path, 16u << 20, &json, &len, &ignored) != SRT_OK)
        return;
    (void)srt_tokenizer_config_token(json, len, "bos_token", &fe->bos_token, &ignored);
    (void)srt_tokenizer_config_token(json, len, "eos_token", &fe->eos_token, &ignored);
    free(json);
}

int srt_frontend_load(const char *model_path, const char *template_file, srt_frontend *fe, srt_err *err)
{
    char cfg_path[4096];
    char *src = NULL;
    size_t len = 0;

    memset(fe, 0, sizeof *fe);
    fe->tool_format = SRT_TOOLS_HERMES;
    if (srt_tokenizer_load_model(model_path, cfg_path, sizeof cfg_path, &fe->tok, err) != SRT_OK)
        goto fail;
    if (cfg_path[0])
        config_tokens(cfg_path, fe);

    if (fe->bos_token == NULL && srt_tokenizer_bos_token(fe->tok) && !(fe->bos_token = strdup(srt_tokenizer_bos_token(fe->tok))))
        goto oom;
    if (fe->eos_token == NULL && srt_tokenizer_eos_token(fe->tok) && !(fe->eos_token = strdup(srt_tokenizer_eos_token(fe->tok))))
        goto oom;

    if (template_file && template_file[0]) {
        if (srt_chat_template_read_file(template_file, &src, &len, err) != SRT_OK)
            goto fail;
    } else if (srt_tokenizer_chat_template(fe->tok)) {
        if (!(src = strdup(srt_tokenizer_chat_template(fe->tok))))
            goto oom;
        len = strlen(src);
    }
    if (src) {
        fe->tool_format = srt_tool_format_detect(src, &fe->tool_format_sure);
        int rc = srt_chat_template_compile(src, len, &fe->tmpl, err);
        free(src);
        if (rc != SRT_OK)
            goto fail;
    }
    return SRT_OK;

oom:
    srt_err_set(err, "%s: out of memory", model_path);
fail:
    srt_frontend_free(fe);
    return SRT_ERROR;
}

static yajl_gen_status gen_str(yajl_gen g, const char *s)
{
    return yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

yajl_gen_status srt_chat_context_gen_common(yajl_gen g, const char *bos_token, const char *eos_token)
{
    yajl_gen_status st = gen_str(g, "add_generation_prompt");
    if (st == yajl_gen_status_ok)
        st = yajl_gen_bool(g, 1);
    if (st == yajl_gen_status_ok)
        st = gen_str(g, "bos_token");
    if (st == yajl_gen_status_ok)
        st = gen_str(g, bos_token ? bos_token : "");
    if (st == yajl_gen_status_ok)
        st = gen_str(g, "eos_token");
    if (st == yajl_gen_status_ok)
        st = gen_str(g, eos_token ? eos_token : "");
    return st;
}

void srt_frontend_free(srt_frontend *fe)
{
    srt_chat_template_free(fe->tmpl);
    srt_tokenizer_free(fe->tok);
    free(fe->bos_token);
    free(fe->eos_token);
    *fe = (srt_frontend){ 0 };
}
