/* libFuzzer: tokenizer.json parsing (all of it: model, normalizer, pre-tokenizer, decoder,
 * added tokens), then encoding and decoding a short text with what loaded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srt/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    srt_tokenizer *tok = NULL;
    srt_err err;
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    if (srt_tokenizer_load_json_mem(s, size, NULL, 0, "fuzz", &tok, &err) == SRT_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        static const char text[] = "Hello, world! 123 <s> caf\xc3\xa9  \n\t x";
        if (srt_tokenizer_encode_alloc(tok, text, sizeof text - 1, 0, &ids, &n, &err) == SRT_OK)
            free(ids);
        srt_tokenizer_free(tok);
    }
    free(s);
    return 0;
}
