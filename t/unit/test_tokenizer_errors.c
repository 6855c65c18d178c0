/* Bad tokenizer files give a clear error naming the file and the field, never a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srt/tokenizer.h"
#include "tap.h"

static char dir[] = "/tmp/srt_tok_errXXXXXX";

static const char *write_tmp(const char *name, const char *content, size_t n)
{
    static char path[4][512];
    static int k;
    char *p = path[k++ & 3];
    snprintf(p, 512, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(content, 1, n, f);
    fclose(f);
    return p;
}

/* Loads a tokenizer.json body; expects failure with every needle in the message. */
static void expect_fail(const char *what, const char *json, const char *config, const char *n1, const char *n2)
{
    const char *tj = write_tmp("tokenizer.json", json, strlen(json));
    const char *cfg = config ? write_tmp("tokenizer_config.json", config, strlen(config)) : NULL;
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};
    int rc = srt_tokenizer_load_json(tj, cfg, &tok, &err);
    int good = rc == SRT_ERROR && tok == NULL && (!n1 || strstr(err.msg, n1)) && (!n2 || strstr(err.msg, n2));
    ok(good, "%s fails naming %s%s%s", what, n1 ? n1 : "", n2 ? " and " : "", n2 ? n2 : "");
    if (!good)
        tap_diag("  message: %s", err.msg);
    srt_tokenizer_free(tok);
}

/* A minimal GGUF v3 with tokenizer metadata only: 256 byte-level tokens, no merges. */
typedef struct gbuf {
    char *p;
    size_t n;
} gbuf;

static void gput(gbuf *b, const void *v, size_t n)
{
    b->p = realloc(b->p, b->n + n);
    memcpy(b->p + b->n, v, n);
    b->n += n;
}

static void gstr(gbuf *b, const char *s, size_t n)
{
    uint64_t l = n;
    gput(b, &l, 8);
    gput(b, s, n);
}

static void gkv_str(gbuf *b, const char *key, const char *val)
{
    uint32_t ty = 8;
    gstr(b, key, strlen(key));
    gput(b, &ty, 4);
    gstr(b, val, strlen(val));
}

static const char *write_gguf(const char *model, const char *pre)
{
    gbuf b = {NULL, 0};
    uint32_t version = 3, ty;
    uint64_t n_tensors = 0, n_kv = pre ? 3 : 2;
    gput(&b, "GGUF", 4);
    gput(&b, &version, 4);
    gput(&b, &n_tensors, 8);
    gput(&b, &n_kv, 8);
    gkv_str(&b, "tokenizer.ggml.model", model);
    if (pre)
        gkv_str(&b, "tokenizer.ggml.pre", pre);
    gstr(&b, "tokenizer.ggml.tokens", strlen("tokenizer.ggml.tokens"));
    ty = 9;
    gput(&b, &ty, 4);
    ty = 8;
    gput(&b, &ty, 4);
    uint64_t n = 256;
    gput(&b, &n, 8);
    for (unsigned i = 0; i < 256; i++) { /* GPT-2's byte alphabet, in byte order */
        int printable = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
        unsigned cp = i;
        if (!printable) {
            cp = 0x100;
            for (unsigned k = 0; k < i; k++)
                if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF)))
                    cp++;
        }
        char u[4];
        size_t l = cp < 0x80 ? 1 : 2;
        if (l == 1)
            u[0] = (char)cp;
        else {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
        }
        gstr(&b, u, l);
    }
    /* merges: an empty string array */
    gstr(&b, "tokenizer.ggml.merges", strlen("tokenizer.ggml.merges"));
    ty = 9;
    gput(&b, &ty, 4);
    ty = 8;
    gput(&b, &ty, 4);
    n = 0;
    gput(&b, &n, 8);
    n_kv++;
    memcpy(b.p + 16, &n_kv, 8);
    while (b.n % 32)
        gput(&b, "", 1);
    const char *p = write_tmp("t.gguf", b.p, b.n);
    free(b.p);
    return p;
}

#define MODEL(extra) \
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]" extra "}"

int main(void)
{
    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp");
        return tap_done();
    }
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};
    ok(srt_tokenizer_load_json("/nonexistent/tokenizer.json", NULL, &tok, &err) == SRT_ERROR &&
           strstr(err.msg, "/nonexistent/tokenizer.json"),
       "missing tokenizer.json names the path: %s", err.msg);

    /* the minimal valid file loads, so the failures below are about the field they break */
    {
        const char *good = "{" MODEL("") ",\"decoder\":{\"type\":\"Fuse\"}}";
        const char *tj = write_tmp("tokenizer.json", good, strlen(good));
        ok(srt_tokenizer_load_json(tj, NULL, &tok, &err) == SRT_OK, "a minimal BPE tokenizer.json loads");
        int32_t ids[8];
        size_t n = 0;
        ok(tok && srt_tokenizer_encode(tok, "abab", 4, 0, ids, 8, &n, &err) == SRT_OK && n == 2 && ids[0] == 2 &&
               ids[1] == 2, "... and encodes \"abab\" as [ab, ab]");
        ok(tok && srt_tokenizer_encode(tok, NULL, 3, 0, ids, 8, &n, &err) == SRT_ERROR, "NULL text is an error");
        srt_detok d;
        char out[256];
        size_t k;
        srt_detok_init(&d, tok, 0);
        ok(srt_detok_push(&d, -1, out, sizeof(out), &k, &err) == SRT_OK && k == 0, "detok drops id -1");
        srt_detok_init(&d, tok, 0);
        ok(srt_detok_push(&d, 2, out, 1, &k, &err) == SRT_ERROR && strstr(err.msg, "too small"),
           "detok reports a too-small output buffer");
        srt_tokenizer_free(tok);
        tok = NULL;
    }

    expect_fail("invalid JSON", "{\"model\": ", NULL, "tokenizer.json", "invalid JSON");
    {
        /* yajl_tree_free recursed once per level: this overflowed the stack */
        size_t d = 1000000;
        char *deep = malloc(2 * d + 32);
        char *q = deep + sprintf(deep, "{\"model\":");
        memset(q, '[', d);
        memset(q + d, ']', d);
        strcpy(q + 2 * d, "}");
        expect_fail("arrays nested 1,000,000 deep", deep, NULL, "tokenizer.json", "nested deeper than 64");
        expect_fail("a tokenizer_config.json nested 1,000,000 deep",
                    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", deep,
                    "tokenizer_config.json", "nested deeper than 64");
        free(deep);
    }
    expect_fail("a JSON array", "[1,2]", NULL, "tokenizer.json", "not a JSON object");
    expect_fail("no model", "{}", NULL, "tokenizer.json", "\"model\"");
    expect_fail("vocab not an object", "{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", NULL,
                "tokenizer.json", "model.vocab");
    expect_fail("merges missing", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}}", NULL, "tokenizer.json",
                "model.merges");
    expect_fail("vocab id not an integer", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}",
                NULL, "model.vocab[\"a\"]", NULL);
    expect_fail("negative vocab id", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-5},\"merges\":[]}}", NULL,
                "-5", "out of range");
    expect_fail("vocab id beyond int32", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":4294967297},\"merges\":[]}}",
                NULL, "4294967297", "out of range");
    expect_fail("post-processor id out of range",
                "{" MODEL("") ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"ids\":[99999999999]}}}}",
                NULL, "TemplateProcessing", "bad ids");
    expect_fail("post-processor id not in the vocab",
                "{" MODEL("") ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"ids\":[77]}}}}",
                NULL, "post_processor", "77");
    expect_fail("merge of unknown tokens",
                "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", NULL,
                "model.merges[0]", "missing from model.vocab");
    expect_fail("malformed merge", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", NULL,
                "model.merges[0]", NULL);
    expect_fail("malformed merge pair", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[[\"a\"]]}}",
                NULL, "model.merges[0]", NULL);
    expect_fail("Unigram model", "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", NULL, "Unigram", NULL);
    expect_fail("BPE dropout", "{" MODEL(",\"dropout\":0.1") "}", NULL, "dropout", NULL);
    expect_fail("continuing_subword_prefix", "{" MODEL(",\"continuing_subword_prefix\":\"##\"") "}", NULL,
                "continuing_subword_prefix", NULL);
    expect_fail("NFD normalizer", "{" MODEL("") ",\"normalizer\":{\"type\":\"NFD\"}}", NULL, "normalizer",
                "\"NFD\"");
    expect_fail("Precompiled normalizer in a Sequence",
                "{" MODEL("") ",\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Precompiled\"}]}}",
                NULL, "normalizer", "\"Precompiled\"");
    expect_fail("Replace normalizer with a regex",
                "{" MODEL("") ",\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" +\"},\"content\":\" \"}}",
                NULL, "normalizer Replace", NULL);
    expect_fail("Whitespace pre-tokenizer", "{" MODEL("") ",\"pre_tokenizer\":{\"type\":\"Whitespace\"}}", NULL,
                "pre_tokenizer", "\"Whitespace\"");
    expect_fail("bad Split regex",
                "{" MODEL("") ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},"
                "\"behavior\":\"Isolated\",\"invert\":false}}",
                NULL, "pre_tokenizer Split", "does not compile");
    expect_fail("bad Split behavior",
                "{" MODEL("") ",\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},"
                "\"behavior\":\"Sideways\",\"invert\":false}}",
                NULL, "behavior", "Sideways");
    expect_fail("WordPiece decoder", "{" MODEL("") ",\"decoder\":{\"type\":\"WordPiece\"}}", NULL, "decoder",
                "\"WordPiece\"");
    expect_fail("Strip decoder with stop",
                "{" MODEL("") ",\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},"
                "{\"type\":\"Strip\",\"content\":\" \",\"start\":0,\"stop\":1}]}}",
                NULL, "decoder Strip", NULL);
    expect_fail("unknown post-processor", "{" MODEL("") ",\"post_processor\":{\"type\":\"Magic\"}}", NULL,
                "post_processor", "\"Magic\"");
    expect_fail("template special token without ids",
                "{" MODEL("") ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":"
                "{\"id\":\"<s>\",\"type_id\":0}}],\"special_tokens\":{}}}",
                NULL, "TemplateProcessing", "<s>");
    expect_fail("added token without id", "{" MODEL("") ",\"added_tokens\":[{\"content\":\"<x>\"}]}", NULL,
                "added_tokens[0]", NULL);
    expect_fail("single_word added token",
                "{" MODEL("") ",\"added_tokens\":[{\"id\":3,\"content\":\"<x>\",\"single_word\":true}]}", NULL,
                "added_tokens[0]", "single_word");
    expect_fail("unk_token not in vocab", "{" MODEL(",\"unk_token\":\"<unk>\"") "}", NULL, "model.unk_token",
                "<unk>");
    expect_fail("config with a bos_token not in the vocab", "{" MODEL("") "}", "{\"bos_token\":\"<s>\"}",
                "tokenizer_config.json", "bos_token");
    expect_fail("invalid config JSON", "{" MODEL("") "}", "{\"bos_token\":", "tokenizer_config.json",
                "invalid JSON");
    expect_fail("chat_template of the wrong type", "{" MODEL("") "}", "{\"chat_template\":5}",
                "tokenizer_config.json", "chat_template");

    /* a real file cut in half */
    {
        FILE *f = fopen("t/fixtures/tokenizers/smollm2/tokenizer.json", "rb");
        static char buf[200000];
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        ok(n > 1000, "read the head of the SmolLM2 tokenizer.json");
        expect_fail("truncated tokenizer.json", buf, NULL, "tokenizer.json", "invalid JSON");
    }

    /* GGUF */
    ok(srt_tokenizer_from_gguf("/nonexistent/x.gguf", &tok, &err) == SRT_ERROR && strstr(err.msg, "/nonexistent/x.gguf"),
       "missing GGUF names the path: %s", err.msg);
    ok(srt_tokenizer_from_gguf("t/fixtures/tokenizers/smollm2/tokenizer_config.json", &tok, &err) == SRT_ERROR &&
           tok == NULL,
       "a file that is not GGUF is rejected: %s", err.msg);
    {
        /* a GGUF cut short inside the token list */
        FILE *f = fopen("t/fixtures/tokenizers/spm-gguf/tokenizer.gguf", "rb");
        static char buf[20000];
        size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
        if (f)
            fclose(f);
        const char *p = write_tmp("cut.gguf", buf, n);
        ok(n == sizeof(buf) && srt_tokenizer_from_gguf(p, &tok, &err) == SRT_ERROR && tok == NULL,
           "a truncated GGUF is rejected: %s", err.msg);
    }

    /* every tokenizer.ggml.pre we know builds a working pipeline; unknown ones fail naming themselves */
    {
        static const char *pres[] = {"default", "gpt2", "smollm", "starcoder", "refact", "llama3", "llama-bpe",
                                     "falcon3", "pixtral", "dbrx", "qwen2", "deepseek-r1-qwen", "tekken", "gpt-4o",
                                     "llama4", NULL};
        int all = 1;
        for (int i = 0; pres[i]; i++) {
            const char *p = write_gguf("gpt2", pres[i]);
            tok = NULL;
            if (srt_tokenizer_from_gguf(p, &tok, &err) != SRT_OK) {
                tap_diag("  pre %s: %s", pres[i], err.msg);
                all = 0;
                continue;
            }
            int32_t ids[64];
            size_t n;
            /* no merges: one token per byte, whatever the split */
            if (srt_tokenizer_encode(tok, "Hi 12 \xc3\xa9!", 8, 0, ids, 64, &n, &err) != SRT_OK || n != 8 ||
                ids[0] != 'H' || ids[6] != 0xC3 || ids[7] != 0xA9) {
                tap_diag("  pre %s: encode gave %zu ids", pres[i], n);
                all = 0;
            }
            srt_tokenizer_free(tok);
        }
        ok(all, "every supported tokenizer.ggml.pre loads and encodes");
        const char *p = write_gguf("gpt2", "no-such-pre");
        ok(srt_tokenizer_from_gguf(p, &tok, &err) == SRT_ERROR && strstr(err.msg, "tokenizer.ggml.pre") &&
               strstr(err.msg, "no-such-pre"),
           "an unknown tokenizer.ggml.pre fails naming it: %s", err.msg);
        p = write_gguf("bert", NULL);
        ok(srt_tokenizer_from_gguf(p, &tok, &err) == SRT_ERROR && strstr(err.msg, "tokenizer.ggml.model") &&
               strstr(err.msg, "bert"),
           "an unsupported tokenizer.ggml.model fails naming it: %s", err.msg);
        p = write_gguf("llama", NULL);
        ok(srt_tokenizer_from_gguf(p, &tok, &err) == SRT_ERROR && strstr(err.msg, "tokenizer.ggml.scores"),
           "a llama tokenizer without scores fails naming the key: %s", err.msg);
    }

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        tap_diag("could not remove %s", dir);
    return tap_done();
}
