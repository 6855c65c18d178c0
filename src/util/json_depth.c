/* Nesting depth of a JSON text, found without building anything.
 *
 * yajl parses iteratively, but yajl_tree_free and every walk over a parsed tree recurse once
 * per level: a 500 KB body of '[' is enough to overflow a worker's stack. Every caller that
 * builds a yajl tree from input it does not control measures the text first and refuses it
 * above SRT_JSON_MAX_DEPTH. The scan only has to be right for valid JSON; on invalid text it
 * may count anything, and the parser that follows reports the syntax error. */
#include "srt/common.h"

size_t srt_json_depth(const char *s, size_t len)
{
    size_t depth = 0, max = 0;
    int in_str = 0;

    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;                    /* the escaped byte cannot end the string */
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max)
                max = depth;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}
