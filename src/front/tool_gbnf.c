/* GBNF pieces for tool-call grammars (srt/output_parse.h): one JSON schema's grammar becomes a part of a
 * larger one by giving its rules a prefix of their own. */
#include "srt/output_parse.h"

#include <stdlib.h>
#include <string.h>

static int gb_put(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *nb = realloc(*buf, c);
        if (nb == NULL)
            return 0;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 1;
}

static int is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_name(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '-';
}

/* the rules every JSON schema's grammar has, the same text each time */
static int is_shared(const char *s, size_t n)
{
    return (n == 2 && memcmp(s, "ws", 2) == 0) || (n > 6 && memcmp(s, "basic_", 6) == 0);
}

char *srt_gbnf_prefix_rules(const char *gbnf, const char *prefix, int flags)
{
    int python_literals = flags & SRT_GBNF_PYTHON_LITERALS;
    int shared = flags & (SRT_GBNF_SHARED_KEEP | SRT_GBNF_SHARED_DROP);
    int line_start = 1;
    static const char *const lits[][2] = { { "\"true\"", "\"True\"" }, { "\"false\"", "\"False\"" },
                                           { "\"null\"", "\"None\"" } };
    size_t len = 0, cap = 0, plen = strlen(prefix), i = 0, j, k;
    char *out = NULL;

    if (!gb_put(&out, &len, &cap, "", 0))
        return NULL;
    while (gbnf[i]) {
        char c = gbnf[i];

        if (line_start && (flags & SRT_GBNF_SHARED_DROP) && is_name_start(c)) {
            for (j = i; is_name(gbnf[j]); j++)
                ;
            if (is_shared(gbnf + i, j - i)) {
                /* defined once, by the piece that keeps them */
                while (gbnf[j] && gbnf[j] != '\n')
                    j++;
                i = gbnf[j] ? j + 1 : j;
                continue;
            }
        }
        line_start = c == '\n';

        if (c == '"' || c == '\'' || c == '[') {
            /* a literal or a character class, escapes included */
            char close = c == '[' ? ']' : c;
            for (j = i + 1; gbnf[j] && gbnf[j] != close; j++) {
                if (gbnf[j] == '\\' && gbnf[j + 1])
                    j++;
            }
            if (gbnf[j])
                j++;
            for (k = 0; python_literals && c == '"' && k < 3; k++) {
                if (j - i == strlen(lits[k][0]) && memcmp(gbnf + i, lits[k][0], j - i) == 0)
                    break;
            }
            if (python_literals && c == '"' && k < 3) {
                if (!gb_put(&out, &len, &cap, lits[k][1], j - i))
                    goto oom;
            } else if (!gb_put(&out, &len, &cap, gbnf + i, j - i)) {
                goto oom;
            }
            i = j;
        } else if (c == '#') {
            for (j = i; gbnf[j] && gbnf[j] != '\n'; j++)
                ;
            if (!gb_put(&out, &len, &cap, gbnf + i, j - i))
                goto oom;
            i = j;
        } else if (is_name_start(c)) {
            for (j = i; is_name(gbnf[j]); j++)
                ;
            if ((!(shared && is_shared(gbnf + i, j - i)) && !gb_put(&out, &len, &cap, prefix, plen))
                || !gb_put(&out, &len, &cap, gbnf + i, j - i))
                goto oom;
            i = j;
        } else if (c >= '0' && c <= '9') {
            /* a repetition's bounds */
            for (j = i; gbnf[j] >= '0' && gbnf[j] <= '9'; j++)
                ;
            if (!gb_put(&out, &len, &cap, gbnf + i, j - i))
                goto oom;
            i = j;
        } else {
            if (!gb_put(&out, &len, &cap, gbnf + i, 1))
                goto oom;
            i++;
        }
    }
    return out;

oom:
    free(out);
    return NULL;
}
