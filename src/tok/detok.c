/* Decoding. Every supported HF decoder chain reduces to: per-token bytes (ByteLevel byte map, Replace,
 * Metaspace's replacement -> ' '), then either lossy UTF-8 over the concatenation (ByteLevel, as Rust's
 * from_utf8_lossy) or byte-fallback runs (a run of <0xNN> tokens that is valid UTF-8 becomes its text,
 * otherwise one U+FFFD per byte), then an optional strip of leading characters. Full decoding is the
 * streaming detokenizer run to the end, so the two can never disagree. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

static int parse_byte_token(const char *s, size_t n)
{
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static int replace_all(tok_buf *out, const char *s, size_t n, const char *a, size_t alen, const char *b, size_t blen)
{
    for (size_t i = 0; i < n;) {
        if (alen && i + alen <= n && memcmp(s + i, a, alen) == 0) {
            if (tok_buf_append(out, b, blen))
                return -1;
            i += alen;
        } else {
            if (tok_buf_append(out, s + i, 1))
                return -1;
            i++;
        }
    }
    return 0;
}

int tok_build_decoder_plan(srt_tokenizer *t, srt_err *err)
{
    tok_buf cur = {0}, nxt = {0};
    int16_t inv[0x144];
    for (int i = 0; i < 0x144; i++)
        inv[i] = -1;
    for (int b = 0; b < 256; b++)
        inv[tok_byte_to_cp((uint8_t)b)] = (int16_t)b;
    t->dec_mode = DEC_LOSSY;
    for (int k = 0; k < t->n_decops; k++)
        if (t->decops[k].kind == DECOP_BYTEFALLBACK)
            t->dec_mode = DEC_GROUPED;
    t->max_dec_len = 8;
    for (uint32_t id = 0; id < t->n_tok; id++) {
        tok_entry *e = &t->tok[id];
        e->byte_val = -1;
        if (!e->str_len)
            continue;
        cur.len = 0;
        if (tok_buf_append(&cur, t->pool.p + e->str_off, e->str_len))
            goto oom;
        for (int k = 0; k < t->n_decops; k++) {
            const tok_decop *op = &t->decops[k];
            nxt.len = 0;
            if (op->kind == DECOP_BYTEFALLBACK) {
                e->byte_val = (int16_t)parse_byte_token(cur.p, cur.len);
                if (e->byte_val >= 0) { /* the token stands for this one byte */
                    char b = (char)e->byte_val;
                    cur.len = 0;
                    if (tok_buf_append(&cur, &b, 1))
                        goto oom;
                    break;
                }
                continue;
            }
            if (op->kind == DECOP_BYTELEVEL) {
                int ok = 1;
                for (size_t i = 0; i < cur.len && ok;) {
                    size_t l = tok_utf8_len((const uint8_t *)cur.p + i, cur.len - i);
                    uint32_t cp;
                    if (!l)
                        break;
                    tok_utf8_decode((const uint8_t *)cur.p + i, &cp);
                    i += l;
                    if (cp >= 0x144 || inv[cp] < 0) {
                        ok = 0;
                        break;
                    }
                    uint8_t byte = (uint8_t)inv[cp];
                    if (tok_buf_append(&nxt, &byte, 1))
                        goto oom;
                }
                if (!ok) /* a character outside the byte alphabet: HF keeps the token's own UTF-8 */
                    continue;
            } else {
                /* Replace, or Metaspace's replacement -> ' ' */
                if (replace_all(&nxt, cur.p, cur.len, op->a, op->alen, op->b, op->blen))
                    goto oom;
            }
            tok_buf tmp = cur;
            cur = nxt;
            nxt = tmp;
        }
        size_t off = t->pool.len;
        if (tok_buf_append(&t->pool, cur.p, cur.len))
            goto oom;
        e->dec_off = (uint32_t)off;
        e->dec_len = (uint32_t)cur.len;
        if (cur.len > t->max_dec_len)
            t->max_dec_len = cur.len;
        if (e->str_len > t->max_dec_len)
            t->max_dec_len = e->str_len;
    }
    tok_buf_free(&cur);
    tok_buf_free(&nxt);
    return SRT_OK;
oom:
    tok_buf_free(&cur);
    tok_buf_free(&nxt);
    srt_err_set(err, "%s: out of memory", t->name);
    return SRT_ERROR;
}

const char *srt_tokenizer_token_bytes(const srt_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_tok || !t->tok[id].str_len) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->tok[id].dec_len;
    return t->pool.p + t->tok[id].dec_off;
}

/* ---------------------------------------------------------------- streaming */

enum { GROUP_NONE = 0, GROUP_HOLD = 1, GROUP_INVALID = 2, GROUP_EAGER = 3 };

typedef struct writer {
    char *p;
    size_t n, cap;
    int overflow;
} writer;

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Emits complete, valid UTF-8 text, applying the leading-character strip. */
static void emit_text(srt_detok *d, writer *w, const char *s, size_t n)
{
    const srt_tokenizer *t = d->tok;
    while (n && d->strip_left) {
        uint32_t cp;
        size_t l = tok_utf8_decode((const uint8_t *)s, &cp);
        if (cp != t->dec_strip_cp) {
            d->strip_left = 0;
            break;
        }
        d->strip_left--;
        s += l;
        n -= l;
    }
    if (!n)
        return;
    if (w->n + n > w->cap) {
        w->overflow = 1;
        return;
    }
    memcpy(w->p + w->n, s, n);
    w->n += n;
}

/* Rust's from_utf8_lossy, one step: 1 = a valid char of *len bytes, 0 = an invalid maximal subpart of
 * *len bytes (one U+FFFD), -1 = an incomplete but so far valid prefix. */
static int utf8_step(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *len = 1;
        return 1;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else {
        *len = 1;
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n)
            return -1;
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) {
            *len = i;
            return 0;
        }
    }
    *len = need;
    return 1;
}

/* Lossy mode: append bytes, emit everything that is resolved, keep an incomplete tail. */
static void feed_lossy(srt_detok *d, writer *w, const uint8_t *s, size_t n)
{
    while (n) {
        if (d->n_pending == 0) {
            /* fast path: the longest run of complete characters straight from the input */
            size_t i = 0;
            while (i < n) {
                size_t l;
                int r = utf8_step(s + i, n - i, &l);
                if (r != 1)
                    break;
                i += l;
            }
            if (i) {
                emit_text(d, w, (const char *)s, i);
                s += i;
                n -= i;
                continue;
            }
        }
        /* slow path through the pending buffer (at most 4 bytes) */
        d->pending[d->n_pending++] = *s++;
        n--;
        while (d->n_pending) {
            size_t l;
            int r = utf8_step(d->pending, d->n_pending, &l);
            if (r < 0)
                break;
            if (r == 1)
                emit_text(d, w, (const char *)d->pending, l);
            else
                emit_text(d, w, FFFD, 3);
            memmove(d->pending, d->pending + l, d->n_pending - l);
            d->n_pending -= (uint32_t)l;
        }
    }
}

static void flush_lossy(srt_detok *d, writer *w)
{
    while (d->n_pending) {
        size_t l;
        int r = utf8_step(d->pending, d->n_pending, &l);
        if (r < 0)
            l = d->n_pending; /* an incomplete character at the end: one U+FFFD */
        if (r == 1)
            emit_text(d, w, (const char *)d->pending, l);
        else
            emit_text(d, w, FFFD, 3);
        memmove(d->pending, d->pending + l, d->n_pending - l);
        d->n_pending -= (uint32_t)l;
    }
}

/* Grouped mode: the held byte run ends. */
static void flush_group(srt_detok *d, writer *w)
{
    if (d->pending_is_group == GROUP_HOLD) {
        if (tok_utf8_valid(d->pending, d->n_pending))
            emit_text(d, w, (const char *)d->pending, d->n_pending);
        else
            for (uint32_t i = 0; i < d->n_pending; i++)
                emit_text(d, w, FFFD, 3);
    } else if (d->pending_is_group == GROUP_EAGER) {
        /* the run outgrew the buffer and its first part went out already; finish it as lossy text */
        flush_lossy(d, w);
    }
    d->n_pending = 0;
    d->pending_is_group = GROUP_NONE;
}

static void push_group_byte(srt_detok *d, writer *w, uint8_t b)
{
    if (d->pending_is_group == GROUP_INVALID) {
        emit_text(d, w, FFFD, 3);
        return;
    }
    if (d->pending_is_group == GROUP_EAGER) {
        feed_lossy(d, w, &b, 1);
        return;
    }
    d->pending_is_group = GROUP_HOLD;
    if (d->n_pending < sizeof(d->pending)) {
        d->pending[d->n_pending++] = b;
        return;
    }
    /* A run longer than the buffer. If it already holds an invalid sequence HF's answer is one U+FFFD
     * per byte for the whole run, which can go out now; otherwise the complete characters go out and
     * the run continues as lossy UTF-8 (differs from HF only if invalid bytes come later in the run). */
    size_t i = 0, l = 0;
    int r = 1;
    while (i < d->n_pending && (r = utf8_step(d->pending + i, d->n_pending - i, &l)) == 1)
        i += l;
    if (r == 0) {
        for (uint32_t k = 0; k <= d->n_pending; k++)
            emit_text(d, w, FFFD, 3);
        d->n_pending = 0;
        d->pending_is_group = GROUP_INVALID;
        return;
    }
    emit_text(d, w, (const char *)d->pending, i);
    memmove(d->pending, d->pending + i, d->n_pending - i);
    d->n_pending -= (uint32_t)i;
    d->pending_is_group = GROUP_EAGER;
    feed_lossy(d, w, &b, 1);
}

void srt_detok_init(srt_detok *d, const srt_tokenizer *tok, unsigned flags)
{
    memset(d, 0, sizeof(*d));
    d->tok = tok;
    d->flags = flags;
    d->strip_left = tok->dec_strip == STRIP_TEXT ? tok->dec_strip_n : 0;
}

size_t srt_detok_max_out(const srt_tokenizer *tok)
{
    return 3 * tok->max_dec_len + 3 * (sizeof(((srt_detok *)0)->pending) + 2) + 16;
}

int srt_detok_push(srt_detok *d, int32_t id, char *out, size_t cap, size_t *n, srt_err *err)
{
    const srt_tokenizer *t = d->tok;
    writer w = {out, 0, cap, 0};
    *n = 0;
    if (id < 0 || (uint32_t)id >= t->n_tok || !t->tok[id].str_len)
        return SRT_OK; /* HF's decode drops ids it has no token for (e.g. a model's padded vocab rows) */
    const tok_entry *e = &t->tok[id];
    if ((d->flags & SRT_DETOK_SKIP_SPECIAL) && (e->flags & TOKF_SPECIAL))
        return SRT_OK;
    int first = d->n_tokens == 0;
    d->n_tokens++;
    if (t->dec_mode == DEC_GROUPED) {
        if (e->byte_val >= 0) {
            push_group_byte(d, &w, (uint8_t)e->byte_val);
            goto out;
        }
        flush_group(d, &w);
    }
    if (t->dec_join_space && !first)
        feed_lossy(d, &w, (const uint8_t *)" ", 1);
    const char *s = t->pool.p + e->dec_off;
    size_t len = e->dec_len;
    if (first && t->dec_strip == STRIP_FIRST_TOKEN_REPL) {
        /* Metaspace decoder: the first token loses its replacement characters */
        const char *src = t->pool.p + e->str_off;
        for (size_t i = 0; i < e->str_len;) {
            if (i + t->dec_repl_len <= e->str_len && memcmp(src + i, t->dec_repl, t->dec_repl_len) == 0) {
                i += t->dec_repl_len;
                continue;
            }
            size_t j = i + 1;
            while (j < e->str_len && !(j + t->dec_repl_len <= e->str_len &&
                                       memcmp(src + j, t->dec_repl, t->dec_repl_len) == 0))
                j++;
            feed_lossy(d, &w, (const uint8_t *)src + i, j - i);
            i = j;
        }
        goto out;
    }
    if (t->dec_mode == DEC_GROUPED)
        emit_text(d, &w, s, len); /* a non-byte token is a whole UTF-8 string */
    else
        feed_lossy(d, &w, (const uint8_t *)s, len);
out:
    if (w.overflow) {
        srt_err_set(err, "%s: detokenizer output buffer too small (%zu bytes)", t->name, cap);
        return SRT_ERROR;
    }
    *n = w.n;
    return SRT_OK;
}

int srt_detok_flush(srt_detok *d, char *out, size_t cap, size_t *n, srt_err *err)
{
    writer w = {out, 0, cap, 0};
    if (d->tok->dec_mode == DEC_GROUPED)
        flush_group(d, &w);
    else
        flush_lossy(d, &w);
    *n = w.n;
    if (w.overflow) {
        srt_err_set(err, "%s: detokenizer output buffer too small (%zu bytes)", d->tok->name, cap);
        return SRT_ERROR;
    }
    return SRT_OK;
}

int srt_tokenizer_decode(const srt_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **text,
                         size_t *len, srt_err *err)
{
    srt_detok d;
    srt_detok_init(&d, t, flags);
    size_t step = srt_detok_max_out(t);
    tok_buf b = {0};
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i <= n; i++) {
        if (tok_buf_reserve(&b, step + 1)) {
            tok_buf_free(&b);
            srt_err_set(err, "%s: out of memory", t->name);
            return SRT_ERROR;
        }
        size_t k;
        int rc = i < n ? srt_detok_push(&d, ids[i], b.p + b.len, step, &k, err)
                       : srt_detok_flush(&d, b.p + b.len, step, &k, err);
        if (rc) {
            tok_buf_free(&b);
            return rc;
        }
        b.len += k;
    }
    if (tok_buf_reserve(&b, 1)) {
        tok_buf_free(&b);
        srt_err_set(err, "%s: out of memory", t->name);
        return SRT_ERROR;
    }
    b.p[b.len] = 0;
    *text = b.p;
    *len = b.len;
    return SRT_OK;
}
