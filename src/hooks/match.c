/* Module-name patterns with Python fnmatch.fnmatch semantics (POSIX: case-sensitive).
 *
 * libc fnmatch(FNM_NOESCAPE) is close but not equal: it treats "[^a]" as a negation and
 * "[^]" as an unterminated set, where Python reads '^' literally. So the matcher follows
 * fnmatch.translate(): '*' matches any run (dots included), '?' one character, "[...]" a
 * set with "!" for negation and "a-z" ranges, and a '[' without a closing ']' is literal. */
#include <string.h>

#include "hooks/registry.h"

/* Length of the set starting at p[0] == '[' (up to and including ']'), or 0 if unterminated. */
static size_t set_len(const char *p)
{
    size_t j = 1;
    if (p[j] == '!')
        j++;
    if (p[j] == ']')
        j++;
    while (p[j] && p[j] != ']')
        j++;
    return p[j] == ']' ? j + 1 : 0;
}

static int set_match(const char *p, size_t len, unsigned char c)
{
    const unsigned char *s = (const unsigned char *)p + 1;
    const unsigned char *end = (const unsigned char *)p + len - 1;   /* the closing ']' */
    int neg = 0, hit = 0;

    if (s < end && *s == '!') {
        neg = 1;
        s++;
    }
    while (s < end) {
        if (s + 2 < end && s[1] == '-') {
            if (s[0] <= c && c <= s[2])
                hit = 1;
            s += 3;
        } else {
            if (*s == c)
                hit = 1;
            s++;
        }
    }
    return hit != neg;
}

int srt_hook_fnmatch(const char *pattern, const char *name)
{
    const char *p = pattern, *s = name;
    const char *star_p = NULL, *star_s = NULL;

    while (*s) {
        if (*p == '*') {
            while (*p == '*')
                p++;
            if (*p == '\0')
                return 1;
            star_p = p;
            star_s = s;
            continue;
        }
        if (*p == '?') {
            p++;
            s++;
            continue;
        }
        if (*p == '[') {
            size_t len = set_len(p);
            if (len) {
                if (set_match(p, len, (unsigned char)*s)) {
                    p += len;
                    s++;
                    continue;
                }
                goto backtrack;
            }
        }
        if (*p && *p == *s) {
            p++;
            s++;
            continue;
        }
backtrack:
        if (!star_p)
            return 0;
        p = star_p;
        s = ++star_s;
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}
