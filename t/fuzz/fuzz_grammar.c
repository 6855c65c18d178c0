/* libFuzzer: the grammar compilers (GBNF, regex, JSON Schema: what response_format and the
 * grammar request fields reach) and the matcher driven by the compiled grammar.
 *
 * Input: byte 0 picks the frontend and its options; the text up to the first NUL byte is the
 * grammar; every byte after it is a step: a token id (over a small vocabulary: printable ASCII,
 * \n and \t, multi-byte and partial-UTF-8 tokens, a special token and EOS), or now and then a
 * rollback. At the first steps, and at every eighth, the token mask must agree with accept_token
 * (the mask is what sampling obeys, accept_token what the scheduler then checks): a
 * disagreement aborts. Computing a fresh state's mask walks the whole vocabulary: the small
 * vocabulary and the sampled checks are what keep this harness at hundreds of exec/s. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "srt/grammar.h"

static const char *MULTI[] = {
    "\n", "\t", "ab", "abc", "{\"", "\":", "\",", "\"}", "true", "false", "null", "12", "-1", "1.5",
    "  ", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82", "\xac", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
    "\xf0\x9f", "\x98\x80", "\xff", "\\n", "\\u00", "},",
};
#define N_ASCII   95                           /* ' ' .. '~' */
#define N_MULTI   (sizeof MULTI / sizeof MULTI[0])
#define ID_SPEC   (N_ASCII + (int32_t)N_MULTI)
#define ID_EOS    (ID_SPEC + 1)
#define N_IDS     ((size_t)ID_EOS + 1)
#define MAX_TEXT  4096     /* bigger grammars compile slowly: they only cost exec/s here */
#define MAX_STEPS 128

static srt_grammar_vocab *vocab(void)
{
    static srt_grammar_vocab *v;
    static char ascii[N_ASCII];
    if (v)
        return v;
    const char *bytes[N_IDS];
    size_t lens[N_IDS];
    uint8_t special[N_IDS];
    int32_t stop = ID_EOS;
    srt_err err;
    for (int i = 0; i < N_ASCII; i++) {
        ascii[i] = (char)(' ' + i);
        bytes[i] = &ascii[i];
        lens[i] = 1;
        special[i] = 0;
    }
    for (size_t i = 0; i < N_MULTI; i++) {
        bytes[N_ASCII + i] = MULTI[i];
        lens[N_ASCII + i] = strlen(MULTI[i]);
        special[N_ASCII + i] = 0;
    }
    bytes[ID_SPEC] = "<|x|>"; lens[ID_SPEC] = 5; special[ID_SPEC] = 1;
    bytes[ID_EOS] = "</s>"; lens[ID_EOS] = 4; special[ID_EOS] = 1;
    if (srt_grammar_vocab_new(N_IDS, bytes, lens, special, &stop, 1, &v, &err) != SRT_OK)
        abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srt_grammar_vocab *v = vocab();
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    size_t tlen = nul ? (size_t)(nul - data) - 1 : size - 1;
    const uint8_t *steps = nul ? nul + 1 : data + size;
    size_t n_steps = (size_t)(data + size - steps);
    if (tlen > MAX_TEXT)
        return 0;

    srt_grammar *g = NULL;
    srt_err err;
    err.msg[0] = 0;
    srt_grammar_json_opts o = { .max_ws = (data[0] >> 2) & 1 ? -1 : (data[0] >> 3) & 7,
                                .allow_additional = (data[0] >> 6) & 1 };
    int rc;
    switch (data[0] & 3) {
    case 0:  rc = srt_grammar_compile_gbnf(v, text, tlen, &g, &err); break;
    case 1:  rc = srt_grammar_compile_regex(v, text, tlen, &g, &err); break;
    case 2:  rc = srt_grammar_compile_json_schema(v, text, tlen, &o, &g, &err); break;
    default: rc = srt_grammar_compile_json_object(v, &o, &g, &err); break;
    }
    if (rc != SRT_OK) {
        if (err.msg[0] == 0)
            abort();      /* an error must say why */
        return 0;
    }
    srt_grammar_matcher *m = srt_grammar_matcher_new(g);
    if (!m)
        abort();
    size_t words = srt_grammar_mask_words(v);
    uint32_t *mask = malloc(words * sizeof *mask);
    char forced[64];
    for (size_t i = 0; i < n_steps && i < MAX_STEPS && !srt_grammar_matcher_is_terminated(m); i++) {
        if (steps[i] == 0xff && i + 1 < n_steps) {
            srt_grammar_matcher_rollback(m, steps[++i] % 8);
            continue;
        }
        /* printable bytes are themselves; any other byte picks one of the other ids */
        int32_t id = steps[i] >= ' ' && steps[i] <= '~' ? steps[i] - ' '
                                                       : N_ASCII + (int32_t)(steps[i] % (N_IDS - N_ASCII));
        if (i >= 8 && i % 8 != 0) {
            (void)srt_grammar_matcher_accept_token(m, id);
            continue;
        }
        srt_grammar_matcher_fill_mask(m, mask);
        int allowed = (mask[id >> 5] >> (id & 31)) & 1;
        if (id == ID_SPEC && allowed)
            abort();      /* special tokens are never allowed */
        if (id == ID_EOS && allowed != srt_grammar_matcher_can_end(m))
            abort();
        (void)srt_grammar_matcher_forced_bytes(m, forced, sizeof forced);
        if (srt_grammar_matcher_accept_token(m, id) != allowed)
            abort();      /* the mask and the matcher disagree */
    }
    free(mask);
    srt_grammar_matcher_free(m);
    srt_grammar_free(g);
    return 0;
}
