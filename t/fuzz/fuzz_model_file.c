/* libFuzzer: model file headers. The input is written to a file and opened as GGUF, then as
 * a safetensors file (header JSON, dtypes, shapes, offsets checked against the size). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/tensor_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    srt_err err;
    srt_gguf *g = NULL;
    if (path[0] == 0)
        snprintf(path, sizeof path, "/tmp/srt-fuzz-model-%d", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    if (srt_gguf_open(path, &g, &err) == SRT_OK)
        srt_gguf_close(g);
    srt_tensor_store s;
    memset(&s, 0, sizeof s);
    (void)srt_safetensors_load(path, &s, &err);
    srt_store_free(&s);
    return 0;
}
