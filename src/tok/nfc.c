/* Unicode NFC and NFKC (canonical or compatibility decomposition, canonical ordering, canonical
 * composition), for tokenizers whose normalizer is NFC (Qwen2) or NFKC. Text without any character that
 * the normalization could touch is left alone. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"
#include "tok/nfc_tables.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define NCOUNT (VCOUNT * TCOUNT)
#define SCOUNT (LCOUNT * NCOUNT)

static int in_sorted(const uint32_t *v, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    if (cp < v[0] || cp > v[n - 1])
        return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == cp;
}

static int is_trigger(uint32_t cp, int compat)
{
    return compat ? in_sorted(nfkc_trigger, NELEM(nfkc_trigger), cp) : in_sorted(nfc_trigger, NELEM(nfc_trigger), cp);
}

static uint8_t ccc_of(uint32_t cp)
{
    size_t lo = 0, hi = NELEM(nfc_ccc);
    if (cp < 0x300)
        return 0;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_ccc[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < NELEM(nfc_ccc) && nfc_ccc[lo].cp == cp) ? nfc_ccc[lo].ccc : 0;
}

static const uint32_t *kdecomp_of(uint32_t cp, size_t *len)
{
    size_t lo = 0, hi = NELEM(nfkc_decomp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfkc_decomp[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < NELEM(nfkc_decomp) && nfkc_decomp[lo].cp == cp) {
        *len = nfkc_decomp[lo].len;
        return nfc_decomp_pool + nfkc_decomp[lo].off;
    }
    return NULL;
}

static const uint32_t *decomp_of(uint32_t cp, size_t *len)
{
    size_t lo = 0, hi = NELEM(nfc_decomp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_decomp[mid].cp < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < NELEM(nfc_decomp) && nfc_decomp[lo].cp == cp) {
        *len = nfc_decomp[lo].len;
        return nfc_decomp_pool + nfc_decomp[lo].off;
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
        return a + (b - TBASE);
    size_t lo = 0, hi = NELEM(nfc_comp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (nfc_comp[mid].a < a || (nfc_comp[mid].a == a && nfc_comp[mid].b < b))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < NELEM(nfc_comp) && nfc_comp[lo].a == a && nfc_comp[lo].b == b)
        return nfc_comp[lo].c;
    return 0;
}

int tok_nfc_needed(const char *s, size_t n, int compat)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80 || (!compat && p[i] < 0xCC)) { /* NFC: everything below U+0300 is stable */
            i++;
            continue;
        }
        if ((p[i] & 0xC0) == 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        i += tok_utf8_decode(p + i, &cp);
        if (is_trigger(cp, compat))
            return 1;
    }
    return 0;
}

int tok_nfc(const char *s, size_t n, int compat, tok_buf *out)
{
    /* a character decomposes into at most NFKC_MAX_DECOMP (canonically at most 4) */
    uint32_t *cps = malloc((n * (compat ? NFKC_MAX_DECOMP : 4) + 4) * sizeof(uint32_t));
    if (!cps)
        return -1;
    size_t m = 0;
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += tok_utf8_decode(p + i, &cp);
        if (cp >= SBASE && cp < SBASE + SCOUNT) {
            uint32_t si = cp - SBASE;
            cps[m++] = LBASE + si / NCOUNT;
            cps[m++] = VBASE + (si % NCOUNT) / TCOUNT;
            if (si % TCOUNT)
                cps[m++] = TBASE + si % TCOUNT;
            continue;
        }
        size_t dl;
        const uint32_t *d = compat ? kdecomp_of(cp, &dl) : NULL;
        if (!d)
            d = decomp_of(cp, &dl);
        if (d) {
            memcpy(cps + m, d, dl * sizeof(uint32_t));
            m += dl;
        } else {
            cps[m++] = cp;
        }
    }
    /* canonical ordering: stable insertion sort of each run of non-starters by class */
    for (size_t i = 1; i < m; i++) {
        uint8_t c = ccc_of(cps[i]);
        if (!c)
            continue;
        size_t j = i;
        uint32_t v = cps[i];
        while (j > 0) {
            uint8_t pc = ccc_of(cps[j - 1]);
            if (pc <= c || pc == 0)
                break;
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = v;
    }
    /* composition */
    size_t r = 0;
    long starter = -1;
    int last_class = 0;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = cps[i];
        int cc = ccc_of(c);
        if (starter >= 0) {
            int adjacent = (size_t)starter == r - 1;
            if (adjacent || (last_class != 0 && last_class < cc)) {
                uint32_t comp = compose(cps[starter], c);
                if (comp) {
                    cps[starter] = comp;
                    continue;
                }
            }
        }
        if (cc == 0) {
            starter = (long)r;
            last_class = 0;
        } else {
            last_class = cc;
        }
        cps[r++] = c;
    }
    for (size_t i = 0; i < r; i++) {
        uint8_t b[4];
        size_t l = tok_utf8_encode(cps[i], b);
        if (tok_buf_append(out, b, l)) {
            free(cps);
            return -1;
        }
    }
    free(cps);
    return 0;
}
