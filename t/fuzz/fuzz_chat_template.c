/* libFuzzer: a chat template (the first line: template text up to a NUL byte) compiled
 * and rendered against a JSON context (what follows the NUL, or a fixed conversation). */
#include <stdint.h>
#include <string.h>

#include "srt/chat_template.h"

static const char CTX[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"hi\"},"
    "{\"role\":\"assistant\",\"content\":\"yo\"}],\"add_generation_prompt\":true,"
    "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"tools\":null,\"documents\":null}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    const char *ctx = nul ? (const char *)nul + 1 : CTX;
    size_t clen = nul ? size - tlen - 1 : sizeof CTX - 1;
    srt_chat_template *t = NULL;
    srt_err err;
    char *out = NULL;
    size_t olen = 0;

    if (srt_chat_template_compile(src, tlen, &t, &err) != SRT_OK)
        return 0;
    if (srt_chat_template_render(t, ctx, clen, &out, &olen, &err) == SRT_OK)
        srt_chat_template_free_output(out);
    srt_chat_template_free(t);
    return 0;
}
