/* UTF-8 walking and Python's notion of whitespace (str.isspace), for string lengths, slicing and strip. */
#include "template/tpl.h"

uint32_t tpl_u8_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) {
        *adv = 0;
        return 0;
    }
    unsigned c = p[0];
    size_t need = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 0;
    if (c >= 0x80 && need == 0) {
        *adv = 1;
        return 0xFFFD;
    }
    if (need + 1 > n) {
        *adv = 1;
        return 0xFFFD;
    }
    uint32_t cp = need == 0 ? c : need == 1 ? (c & 0x1F) : need == 2 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i <= need; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            *adv = 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    *adv = need + 1;
    return cp;
}

bool tpl_u8_is_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

size_t tpl_u8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            k++;
    return k;
}

size_t tpl_u8_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0, k = 0;
    while (i < n) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (k == cp)
                return i;
            k++;
        }
        i++;
    }
    return n;
}

bool tpl_py_isspace_cp(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

size_t tpl_u8_space_at(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = (unsigned char)s[0];
    if (c < 0x80)
        return tpl_py_isspace_cp(c) ? 1 : 0;
    size_t adv;
    uint32_t cp = tpl_u8_decode(s, n, &adv);
    return tpl_py_isspace_cp(cp) ? adv : 0;
}

size_t tpl_u8_space_before(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned char c = (unsigned char)s[n - 1];
    if (c < 0x80)
        return tpl_py_isspace_cp(c) ? 1 : 0;
    size_t start = n - 1;
    while (start > 0 && n - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80)
        start--;
    size_t adv;
    uint32_t cp = tpl_u8_decode(s + start, n - start, &adv);
    return (adv == n - start && tpl_py_isspace_cp(cp)) ? adv : 0;
}
