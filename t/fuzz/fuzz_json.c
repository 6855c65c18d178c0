/* libFuzzer: request bodies and every JSON file the engine reads go through the depth
 * check, then yajl's tree (whose free recurses): the pair must never crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "srt/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), ebuf[256];
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    if (srt_json_depth(s, size) <= SRT_JSON_MAX_DEPTH) {
        yajl_val v = yajl_tree_parse(s, ebuf, sizeof ebuf);
        yajl_tree_free(v);
    }
    free(s);
    return 0;
}
