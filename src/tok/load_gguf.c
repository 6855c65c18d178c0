/* Tokenizer from GGUF metadata (tokenizer.ggml.*), built to match what HF transformers makes of the
 * same file, with tokenizer.ggml.pre choosing the pre-tokenizer the original tokenizer.json had. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "tok/tok_internal.h"

int tok_setup_pipeline(srt_tokenizer *t, const char *normalizer, const char *pre_tokenizer, const char *decoder,
                       srt_err *err);

#define GPT2_RE "'s|'t|'re|'ve|'m|'ll|'d| ?\\\\p{L}+| ?\\\\p{N}+| ?[^\\\\s\\\\p{L}\\\\p{N}]+|\\\\s+(?!\\\\S)|\\\\s+"
#define LLAMA3_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define QWEN2_RE "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define TEKKEN_RE "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define GPT4O_RE "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{Lu}\\\\p{Lt}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]+[\\\\p{Ll}\\\\p{Lm}\\\\p{Lo}\\\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n/]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define BL(prefix, regex) "{\"type\":\"ByteLevel\",\"add_prefix_space\":" prefix ",\"use_regex\":" regex "}"

/* tokenizer.ggml.pre -> (normalizer, pre_tokenizer) in tokenizer.json terms */
static const struct pre_entry {
    const char *names;
    const char *normalizer;
    const char *pretok; /* %s = add_prefix_space */
} PRE[] = {
    {"|default|gpt2|gpt-2|", NULL, BL("%s", "true")},
    {"|smollm|starcoder|refact|", NULL,
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true}," BL("%s", "true") "]}"},
    {"|llama3|llama-bpe|llama-v3|falcon3|pixtral|dbrx|smaug-bpe|", NULL,
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" LLAMA3_RE
     "\"},\"behavior\":\"Isolated\",\"invert\":false}," BL("%s", "false") "]}"},
    {"|qwen2|deepseek-r1-qwen|", "{\"type\":\"NFC\"}",
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" QWEN2_RE
     "\"},\"behavior\":\"Isolated\",\"invert\":false}," BL("%s", "false") "]}"},
    {"|tekken|", NULL,
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" TEKKEN_RE
     "\"},\"behavior\":\"Isolated\",\"invert\":false}," BL("%s", "false") "]}"},
    {"|gpt-4o|llama4|", NULL,
     "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" GPT4O_RE
     "\"},\"behavior\":\"Isolated\",\"invert\":false}," BL("%s", "false") "]}"},
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static int get_str0(const srt_gguf *g, const char *key, char *buf, size_t cap)
{
    srt_gguf_str s;
    if (srt_gguf_get_str(g, key, &s) != SRT_OK || s.len >= cap)
        return -1;
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = 0;
    return 0;
}

static int32_t get_id(const srt_gguf *g, const char *key, uint32_t n_vocab)
{
    int64_t v;
    if (srt_gguf_get_i64(g, key, &v) != SRT_OK || v < 0 || v >= (int64_t)n_vocab)
        return -1;
    return (int32_t)v;
}

/* Llama-style GGUF has scores, not merges. As transformers rebuilds them: every split of a token into two
 * vocab tokens is a merge, sorted by the merged token's score (best first), then by the character length
 * of the left and of the right piece (longest first), then token order and the pieces' ids. */
typedef struct spm_merge {
    float score;
    uint32_t llen, rlen;
    int32_t result, left, right;
} spm_merge;

static int cmp_spm_merge(const void *a, const void *b)
{
    const spm_merge *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->llen != y->llen)
        return x->llen > y->llen ? -1 : 1;
    if (x->rlen != y->rlen)
        return x->rlen > y->rlen ? -1 : 1;
    if (x->result != y->result)
        return x->result < y->result ? -1 : 1;
    if (x->left != y->left)
        return x->left < y->left ? -1 : 1;
    return x->right < y->right ? -1 : x->right > y->right;
}

static uint32_t n_chars(const char *s, size_t n)
{
    uint32_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

static int spm_merges(srt_tokenizer *t, const uint8_t *scores, uint32_t n, srt_err *err)
{
    size_t cap = 1024, cnt = 0;
    spm_merge *m = malloc(cap * sizeof(*m));
    if (!m)
        goto oom;
    for (uint32_t id = 0; id < n; id++) {
        const tok_entry *e = &t->tok[id];
        if (!(e->flags & TOKF_IN_MODEL) || e->str_len < 2)
            continue;
        const char *s = t->pool.p + e->key_off;
        for (uint32_t k = 1; k < e->key_len; k++) {
            if (((uint8_t)s[k] & 0xC0) == 0x80)
                continue;
            int32_t l = tok_lookup(t, &t->by_key, s, k, 1);
            int32_t r = l >= 0 ? tok_lookup(t, &t->by_key, s + k, e->key_len - k, 1) : -1;
            if (r < 0)
                continue;
            if (cnt == cap) {
                cap *= 2;
                spm_merge *p = realloc(m, cap * sizeof(*m));
                if (!p)
                    goto oom;
                m = p;
            }
            float sc;
            memcpy(&sc, scores + 4 * (size_t)id, sizeof(sc)); /* the file need not align floats */
            m[cnt++] = (spm_merge){sc, n_chars(s, k), n_chars(s + k, e->key_len - k), (int32_t)id, l, r};
        }
    }
    qsort(m, cnt, sizeof(*m), cmp_spm_merge);
    if (tok_alloc_merges(t, cnt, err))
        goto fail;
    for (size_t i = 0; i < cnt; i++)
        if (tok_add_merge(t, m[i].left, m[i].right, m[i].result, (uint32_t)i, err))
            goto fail;
    free(m);
    return SRT_OK;
oom:
    srt_err_set(err, "%s: out of memory", t->name);
fail:
    free(m);
    return SRT_ERROR;
}

static int bpe_merges(srt_tokenizer *t, const srt_gguf_kv *kv, srt_err *err)
{
    if (tok_alloc_merges(t, kv->arr_n, err))
        return SRT_ERROR;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        const char *s = kv->arr_strs[i].ptr;
        size_t n = kv->arr_strs[i].len;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            srt_err_set(err, "%s: tokenizer.ggml.merges[%llu] is not \"left right\"", t->name, (unsigned long long)i);
            return SRT_ERROR;
        }
        size_t alen = (size_t)(sp - s), blen = n - alen - 1;
        char *ab = malloc(n);
        if (!ab) {
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        memcpy(ab, s, alen);
        memcpy(ab + alen, sp + 1, blen);
        int32_t ia = tok_lookup(t, &t->by_str, s, alen, 0);
        int32_t ib = tok_lookup(t, &t->by_str, sp + 1, blen, 0);
        int32_t ir = tok_lookup(t, &t->by_str, ab, alen + blen, 0);
        free(ab);
        if (ia < 0 || ib < 0 || ir < 0) {
            srt_err_set(err, "%s: tokenizer.ggml.merges[%llu] (\"%.*s\") uses a token missing from "
                             "tokenizer.ggml.tokens", t->name, (unsigned long long)i, (int)n, s);
            return SRT_ERROR;
        }
        if (tok_add_merge(t, ia, ib, ir, (uint32_t)i, err))
            return SRT_ERROR;
    }
    return SRT_OK;
}

int srt_tokenizer_from_gguf(const char *path, srt_tokenizer **out, srt_err *err)
{
    *out = NULL;
    srt_gguf *g = NULL;
    if (srt_gguf_open(path, &g, err) != SRT_OK)
        return SRT_ERROR;
    srt_tokenizer *t = tok_new(path);
    int rc = SRT_ERROR;
    char model[32], pre[64];
    if (!t) {
        srt_err_set(err, "%s: out of memory", path);
        goto out;
    }
    if (get_str0(g, "tokenizer.ggml.model", model, sizeof(model))) {
        srt_err_set(err, "%s: no tokenizer.ggml.model string", path);
        goto out;
    }
    int spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2")) {
        srt_err_set(err, "%s: tokenizer.ggml.model \"%s\" is not supported (gpt2, llama)", path, model);
        goto out;
    }
    const srt_gguf_kv *toks = srt_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != SRT_GGUF_ARRAY || toks->arr_type != SRT_GGUF_STRING || !toks->arr_n ||
        toks->arr_n > (1u << 24)) {
        srt_err_set(err, "%s: tokenizer.ggml.tokens is missing or not a string array", path);
        goto out;
    }
    uint32_t n = (uint32_t)toks->arr_n;
    const srt_gguf_kv *types = srt_gguf_find(g, "tokenizer.ggml.token_type");
    if (types && (types->type != SRT_GGUF_ARRAY || types->arr_type != SRT_GGUF_INT32 || types->arr_n != n)) {
        srt_err_set(err, "%s: tokenizer.ggml.token_type is not an int32 array of %u entries", path, n);
        goto out;
    }
    const srt_gguf_kv *scores = srt_gguf_find(g, "tokenizer.ggml.scores");
    if (spm && (!scores || scores->type != SRT_GGUF_ARRAY || scores->arr_type != SRT_GGUF_FLOAT32 ||
                scores->arr_n != n)) {
        srt_err_set(err, "%s: tokenizer.ggml.scores is missing or not a float32 array of %u entries", path, n);
        goto out;
    }
    const srt_gguf_kv *merges = srt_gguf_find(g, "tokenizer.ggml.merges");
    if (!spm && (!merges || merges->type != SRT_GGUF_ARRAY || merges->arr_type != SRT_GGUF_STRING)) {
        srt_err_set(err, "%s: tokenizer.ggml.merges is missing or not a string array", path);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        int32_t ty = TT_NORMAL;
        if (types)
            memcpy(&ty, types->value + 4 * (size_t)i, 4);
        uint16_t fl = TOKF_IN_MODEL;
        if (ty == TT_CONTROL || ty == TT_UNKNOWN) /* <unk> is a special token in HF too */
            fl |= TOKF_ADDED | TOKF_SPECIAL;
        else if (ty == TT_USER)
            fl |= TOKF_ADDED;
        if (tok_add_token(t, (int32_t)i, toks->arr_strs[i].ptr, toks->arr_strs[i].len, fl, err))
            goto out;
    }
    int64_t v;
    int add_space = srt_gguf_get_i64(g, "tokenizer.ggml.add_space_prefix", &v) == SRT_OK ? (int)v : spm;
    if (spm) {
        /* as transformers' LlamaTokenizer: Metaspace (prepend on the first piece), byte fallback */
        t->byte_fallback = 1;
        t->fuse_unk = 1;
        const char *pre_json = add_space ? "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":"
                                           "\"first\",\"split\":false}"
                                         : "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":"
                                           "\"never\",\"split\":false}";
        const char *dec = add_space ? "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
                                      "{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
                                      "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,"
                                      "\"stop\":0}]}"
                                    : "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":"
                                      "{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
                                      "{\"type\":\"Fuse\"}]}";
        if (tok_setup_pipeline(t, NULL, pre_json, dec, err))
            goto out;
    } else {
        if (get_str0(g, "tokenizer.ggml.pre", pre, sizeof(pre)))
            strcpy(pre, "default");
        const struct pre_entry *pe = NULL;
        char key[80];
        snprintf(key, sizeof(key), "|%s|", pre);
        for (size_t i = 0; i < sizeof(PRE) / sizeof(PRE[0]); i++)
            if (strstr(PRE[i].names, key))
                pe = &PRE[i];
        if (!pe) {
            srt_err_set(err, "%s: tokenizer.ggml.pre \"%s\" is not supported (default, gpt2, smollm, starcoder, "
                             "refact, llama3, llama-bpe, falcon3, pixtral, dbrx, qwen2, deepseek-r1-qwen, tekken, "
                             "gpt-4o, llama4)", path, pre);
            goto out;
        }
        char pt[2048];
        snprintf(pt, sizeof(pt), pe->pretok, add_space ? "true" : "false");
        if (tok_setup_pipeline(t, pe->normalizer, pt, "{\"type\":\"ByteLevel\"}", err))
            goto out;
    }
    if (tok_finish(t, err))
        goto out;
    if (spm ? spm_merges(t, scores->value, n, err) : bpe_merges(t, merges, err))
        goto out;
    t->bos_id = get_id(g, "tokenizer.ggml.bos_token_id", n);
    t->eos_id = get_id(g, "tokenizer.ggml.eos_token_id", n);
    t->pad_id = get_id(g, "tokenizer.ggml.padding_token_id", n);
    /* transformers' GGUF tokenizers have no BPE unk token: byte fallback covers every character */
    size_t l;
    const char *s;
    if (t->bos_id >= 0 && (s = srt_tokenizer_token_str(t, t->bos_id, &l)))
        t->bos_str = tok_strndup(s, l);
    if (t->eos_id >= 0 && (s = srt_tokenizer_token_str(t, t->eos_id, &l)))
        t->eos_str = tok_strndup(s, l);
    int add_bos = srt_gguf_get_i64(g, "tokenizer.ggml.add_bos_token", &v) == SRT_OK ? (int)v : spm;
    int add_eos = srt_gguf_get_i64(g, "tokenizer.ggml.add_eos_token", &v) == SRT_OK ? (int)v : 0;
    if (add_bos && t->bos_id >= 0) {
        t->post_pre = malloc(sizeof(int32_t));
        if (!t->post_pre)
            goto oom;
        t->post_pre[0] = t->bos_id;
        t->n_post_pre = 1;
        t->adds_bos = 1;
    }
    if (add_eos && t->eos_id >= 0) {
        t->post_post = malloc(sizeof(int32_t));
        if (!t->post_post)
            goto oom;
        t->post_post[0] = t->eos_id;
        t->n_post_post = 1;
    }
    srt_gguf_str ct;
    if (srt_gguf_get_str(g, "tokenizer.chat_template", &ct) == SRT_OK) {
        t->chat_template = tok_strndup(ct.ptr, ct.len);
        if (!t->chat_template)
            goto oom;
    }
    rc = SRT_OK;
    goto out;
oom:
    srt_err_set(err, "%s: out of memory", path);
out:
    srt_gguf_close(g);
    if (rc) {
        srt_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return SRT_OK;
}
