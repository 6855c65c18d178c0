/* libFuzzer: hook spec files (srt_forward_hooks), parsed without loading any library. */
#include <stdint.h>

#include "hooks/hooks_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srt_hook_spec_list l;
    srt_err err;
    if (srt_hook_spec_parse((const char *)data, size, "fuzz", &l, &err) == SRT_OK)
        srt_hook_spec_list_free(&l);
    return 0;
}
