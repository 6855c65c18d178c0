/* The chat-template interpreter's case methods against Python's str methods for every code
 * point: the probes of scripts/gen_case_tables.py are run through tpl_case_map / tpl_case_is and the
 * tpl_cp_printable / alpha / digit / alnum predicates,
 * hashed per chunk of 4096 code points and compared with the hashes Python wrote into
 * t/fixtures/ucase/python_case.txt. A differing chunk is searched for its first differing
 * code point only by printing the C answers (re-run the script's probes() in Python on it). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/tpl.h"
#include "tap.h"

#define FIX "t/fixtures/ucase/python_case.txt"
#define CHUNK 4096

typedef struct { char *p; size_t n, cap; } buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static size_t enc(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* s = pre + chr(c) + post, mapped by mode, appended to out */
static void probe_n(buf *out, const char *pre, uint32_t c, const char *post, size_t pn, int mode)
{
    char in[64], res[3 * 64];
    size_t n = strlen(pre);
    memcpy(in, pre, n);
    n += enc(c, in + n);
    memcpy(in + n, post, pn);
    n += pn;
    put(out, res, tpl_case_map(in, n, mode, res));
    put(out, "\0", 1);
}

static void probe(buf *out, const char *pre, uint32_t c, const char *post, int mode)
{
    probe_n(out, pre, c, post, strlen(post), mode);
}

static void probe_is(buf *out, uint32_t c, const char *post, bool upper)
{
    char in[16];
    size_t n = enc(c, in);
    memcpy(in + n, post, strlen(post));
    n += strlen(post);
    put(out, tpl_case_is(in, n, upper) ? "T" : "F", 1);
}

/* the same order as probes() in scripts/gen_case_tables.py */
static void probes(buf *o, uint32_t c)
{
    char jt[16] = "a ";   /* s + "a " + s + "Σ" (c may be NUL) */
    size_t jn = 2 + enc(c, jt + 2);
    memcpy(jt + jn, "\xce\xa3", 2);
    jn += 2;
    probe(o, "", c, "", TPL_CASE_UPPER);
    probe(o, "", c, "", TPL_CASE_LOWER);
    probe(o, "", c, "", TPL_CASE_TITLE);
    probe(o, "", c, "", TPL_CASE_CAPITALIZE);
    probe(o, "A", c, "\xce\xa3", TPL_CASE_LOWER);
    probe(o, "1", c, "\xce\xa3", TPL_CASE_LOWER);
    probe(o, "A\xce\xa3", c, "", TPL_CASE_LOWER);
    probe(o, "A\xce\xa3", c, "a", TPL_CASE_LOWER);
    probe(o, "", c, "a", TPL_CASE_TITLE);
    probe(o, "a", c, "a", TPL_CASE_TITLE);
    probe(o, "", c, "a\xce\xa3", TPL_CASE_CAPITALIZE);
    probe_n(o, "", c, jt, jn, TPL_CASE_JINJA_TITLE);
    probe_is(o, c, "", false);
    put(o, "\0", 1);
    probe_is(o, c, "", true);
    put(o, "\0", 1);
    probe_is(o, c, "a", false);
    put(o, "\0", 1);
    probe_is(o, c, "A", true);
    put(o, "\0", 1);
    put(o, tpl_cp_printable(c) ? "T" : "F", 1); /* isprintable, isalpha, isdigit, isalnum */
    put(o, tpl_cp_alpha(c) ? "T" : "F", 1);
    put(o, tpl_cp_digit(c) ? "T" : "F", 1);
    put(o, tpl_cp_alnum(c) ? "T" : "F", 1);
    put(o, "\x01", 1);
}

static uint64_t fnv(const char *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

static void check_str(int mode, const char *in, const char *want, const char *what)
{
    char out[256];
    size_t n = tpl_case_map(in, strlen(in), mode, out);
    out[n] = 0;
    if (!ok(strcmp(out, want) == 0, "%s", what))
        tap_diag("  got '%s', want '%s'", out, want);
}

int main(void)
{
    /* the examples and the special cases by name */
    check_str(TPL_CASE_UPPER, "vi\xe1\xbb\x87t nam", "VI\xe1\xbb\x86T NAM", "'việt nam'.upper() = 'VIỆT NAM'");
    check_str(TPL_CASE_TITLE, "stra\xc3\x9f" "e", "Stra\xc3\x9f" "e", "'straße'.title() = 'Straße'");
    check_str(TPL_CASE_UPPER, "stra\xc3\x9f" "e", "STRASSE", "'straße'.upper() = 'STRASSE'");
    check_str(TPL_CASE_TITLE, "\xc7\x86" "emal", "\xc7\x85" "emal", "'ǆemal'.title() = 'ǅemal' (titlecase digraph)");
    check_str(TPL_CASE_LOWER, "\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3", "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83",
              "'ΟΔΟΣ Σ'.lower(): final sigma, lone sigma");
    check_str(TPL_CASE_TITLE, "they're bill's", "They'Re Bill'S", "title() restarts after an apostrophe, as Python");
    check_str(TPL_CASE_JINJA_TITLE, "they're (bill's)-x", "They're (Bill's)-X", "jinja2 title splits on - space ( { [ <");
    check_str(TPL_CASE_CAPITALIZE, "\xef\xac\x81nal WORD", "Final word", "'ﬁnal WORD'.capitalize(): ligature titlecased");
    check_str(TPL_CASE_LOWER, "\xc4\xb0", "i\xcc\x87", "'İ'.lower() = 'i̇'");
    check_str(TPL_CASE_UPPER, "a\xff" "b", "A\xff" "B", "invalid UTF-8 bytes are copied");
    ok(tpl_case_is("ABC1", 4, true) && !tpl_case_is("ABc", 3, true) && tpl_case_is("\xc3\x9f", 2, false) &&
       !tpl_case_is("\xc7\x85", 2, false) && !tpl_case_is("123", 3, false), "isupper / islower");

    FILE *f = fopen(FIX, "r");
    if (!ok(f != NULL, "fixture %s", FIX))
        return tap_done();
    char line[128];
    int chunks = 0, bad = 0;
    buf b = { 0 };
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        unsigned base;
        unsigned long long want;
        if (sscanf(line, "%x %llx", &base, &want) != 2)
            continue;
        uint64_t h = 0xcbf29ce484222325ULL;
        for (uint32_t cp = base; cp < base + CHUNK; cp++) {
            if (cp >= 0xD800 && cp < 0xE000)
                continue;
            b.n = 0;
            probes(&b, cp);
            h = fnv(b.p, b.n, h);
        }
        chunks++;
        if (h != want) {
            bad++;
            if (bad <= 5)
                tap_diag("chunk U+%04X..U+%04X differs from Python", base, base + CHUNK - 1);
        }
    }
    fclose(f);
    free(b.p);
    ok(chunks == 0x110000 / CHUNK, "fixture has every chunk (%d)", chunks);
    ok(bad == 0,
       "every code point: upper/lower/title/capitalize/jinja title/islower/isupper/isprintable/isalpha/isdigit/"
       "isalnum = Python (%d chunks differ)",
       bad);
    return tap_done();
}
