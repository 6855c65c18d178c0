/* Python's str.upper/lower/title/capitalize/islower/isupper and jinja2's title filter on UTF-8,
 * with the full Unicode case mapping (special casing such as ß -> SS, titlecase digraphs, final
 * sigma) from tables generated out of Python's unicodedata (scripts/gen_case_tables.py).
 * Bytes that are not valid UTF-8 are copied as they are and count as U+FFFD (neither cased nor
 * case-ignorable). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "template/tpl.h"
#include "template/ucase_tables.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool in_ranges(const uc_range *r, size_t n, uint32_t c)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid].lo)
            hi = mid;
        else if (c > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool tpl_cp_cased(uint32_t c) { return in_ranges(uc_cased, N_OF(uc_cased), c); }
bool tpl_cp_printable(uint32_t c) { return !in_ranges(uc_unprintable, N_OF(uc_unprintable), c); }
bool tpl_cp_alpha(uint32_t c) { return in_ranges(uc_alpha, N_OF(uc_alpha), c); }
bool tpl_cp_digit(uint32_t c) { return in_ranges(uc_digit, N_OF(uc_digit), c); }
bool tpl_cp_alnum(uint32_t c) { return in_ranges(uc_alnum, N_OF(uc_alnum), c); }
static bool cp_ignorable(uint32_t c) { return in_ranges(uc_ignorable, N_OF(uc_ignorable), c); }

static const uc_map *find_map(uint32_t c)
{
    size_t lo = 0, hi = N_OF(uc_maps);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < uc_maps[mid].cp)
            hi = mid;
        else if (c > uc_maps[mid].cp)
            lo = mid + 1;
        else
            return &uc_maps[mid];
    }
    return NULL;
}

static size_t put_cp(char *o, uint32_t cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

enum { K_UPPER, K_LOWER, K_TITLE };

/* Writes the mapping of the char at s (adv bytes, code point c); an unmapped char is copied. */
static size_t put_mapped(char *o, const char *s, size_t adv, uint32_t c, int kind)
{
    const uc_map *m = find_map(c);
    uint32_t v = !m ? c : kind == K_UPPER ? m->upper : kind == K_LOWER ? m->lower : m->title;
    if (v == c) {
        memcpy(o, s, adv);
        return adv;
    }
    if (!(v & 0x80000000u))
        return put_cp(o, v);
    size_t k = 0, cnt = (v >> 24) & 0x7F, off = v & 0xFFFFFF;
    for (size_t i = 0; i < cnt; i++)
        k += put_cp(o + k, uc_multi[off + i]);
    return k;
}

/* Σ at s[i] (2 bytes) is final when a cased char precedes it (before_cased: the last char
 * before it that is not case-ignorable was cased) and none follows, skipping case-ignorables. */
static bool final_sigma(const char *s, size_t n, size_t i, bool before_cased)
{
    if (!before_cased)
        return false;
    for (size_t j = i + 2; j < n;) {
        size_t adv;
        uint32_t c = tpl_u8_decode(s + j, n - j, &adv);
        if (!cp_ignorable(c))
            return !tpl_cp_cased(c);
        j += adv;
    }
    return true;
}

/* lower() of s[from, n) with the final-sigma context of s[ctx, n): before_cased carries the
 * context of s[ctx, from). */
static size_t lower_range(const char *s, size_t n, size_t from, bool before_cased, char *o)
{
    size_t k = 0;
    for (size_t i = from; i < n;) {
        size_t adv;
        uint32_t c = tpl_u8_decode(s + i, n - i, &adv);
        if (c == 0x3A3 && adv == 2 && final_sigma(s, n, i, before_cased))
            k += put_cp(o + k, 0x3C2);
        else
            k += put_mapped(o + k, s + i, adv, c, K_LOWER);
        if (!cp_ignorable(c))
            before_cased = tpl_cp_cased(c);
        i += adv;
    }
    return k;
}

size_t tpl_case_map(const char *s, size_t n, int mode, char *o)
{
    size_t k = 0, i = 0, adv;
    uint32_t c;
    switch (mode) {
    case TPL_CASE_UPPER:
        for (; i < n; i += adv) {
            c = tpl_u8_decode(s + i, n - i, &adv);
            k += put_mapped(o + k, s + i, adv, c, K_UPPER);
        }
        return k;
    case TPL_CASE_LOWER:
        return lower_range(s, n, 0, false, o);
    case TPL_CASE_CAPITALIZE:
        if (n == 0)
            return 0;
        c = tpl_u8_decode(s, n, &adv);
        k = put_mapped(o, s, adv, c, K_TITLE);
        return k + lower_range(s, n, adv, !cp_ignorable(c) && tpl_cp_cased(c), o + k);
    case TPL_CASE_TITLE: {
        /* after a cased char: lower (final sigma in the whole string's context); else title */
        bool prev_cased = false, before_cased = false;
        for (; i < n; i += adv) {
            c = tpl_u8_decode(s + i, n - i, &adv);
            if (!prev_cased)
                k += put_mapped(o + k, s + i, adv, c, K_TITLE);
            else if (c == 0x3A3 && adv == 2 && final_sigma(s, n, i, before_cased))
                k += put_cp(o + k, 0x3C2);
            else
                k += put_mapped(o + k, s + i, adv, c, K_LOWER);
            prev_cased = tpl_cp_cased(c);
            if (!cp_ignorable(c))
                before_cased = prev_cased;
        }
        return k;
    }
    case TPL_CASE_JINJA_TITLE:
        /* jinja2: re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower(): each word's
         * tail is lowered as a string of its own (its final sigma sees only the tail) */
        while (i < n) {
            size_t we = i;
            bool delim = false;
            for (size_t j = i; j < n; j += adv) {
                c = tpl_u8_decode(s + j, n - j, &adv);
                bool d = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || tpl_py_isspace_cp(c);
                if (j == i)
                    delim = d;
                else if (d != delim)
                    break;
                we = j + adv;
            }
            if (delim) {
                memcpy(o + k, s + i, we - i);
                k += we - i;
            } else {
                c = tpl_u8_decode(s + i, we - i, &adv);
                k += put_mapped(o + k, s + i, adv, c, K_UPPER);
                k += lower_range(s + i + adv, we - i - adv, 0, false, o + k);
            }
            i = we;
        }
        return k;
    }
    return 0;
}

bool tpl_case_is(const char *s, size_t n, bool upper)
{
    bool cased = false;
    for (size_t i = 0, adv; i < n; i += adv) {
        uint32_t c = tpl_u8_decode(s + i, n - i, &adv);
        bool lo = in_ranges(uc_lower, N_OF(uc_lower), c), up = in_ranges(uc_upper, N_OF(uc_upper), c);
        bool ti = in_ranges(uc_title, N_OF(uc_title), c);
        if (n == adv)   /* one char: Python answers with the char's own flag */
            return upper ? up : lo;
        if ((upper ? lo : up) || ti)
            return false;
        if (upper ? up : lo)
            cased = true;
    }
    return cased;
}
