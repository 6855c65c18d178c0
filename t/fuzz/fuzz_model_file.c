/* libFuzzer: model file headers. The input is parsed in memory, by the production parsers
 * behind srt_gguf_open and srt_safetensors_load, as a GGUF file, then as a safetensors file
 * (header JSON, dtypes, shapes, offsets checked against the size). Parsing the caller's
 * buffer (not a page-rounded mapping) lets ASan see a read one byte past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"
#include "model/tensor_store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    srt_err err;
    srt_gguf *g = NULL;
    srt_tensor_store s;
    if (srt_gguf_open_buffer(data, size, "fuzz.gguf", &g, &err) == SRT_OK) {
        /* the typed getters read values where the directory says they are */
        for (uint64_t i = 0; i < g->n_kv; i++) {
            int64_t iv;
            float fv;
            srt_gguf_str sv;
            (void)srt_gguf_get_i64(g, g->kv[i].key, &iv);
            (void)srt_gguf_get_f32(g, g->kv[i].key, &fv);
            if (srt_gguf_get_str(g, g->kv[i].key, &sv) == SRT_OK && sv.len > 0 &&
                ((const uint8_t *)sv.ptr < data || (const uint8_t *)sv.ptr + sv.len > data + size))
                abort();
        }
        memset(&s, 0, sizeof s);
        (void)srt_gguf_to_store(g, &s, &err);
        srt_gguf_close(g);
        srt_store_free(&s);
    }
    memset(&s, 0, sizeof s);
    (void)srt_safetensors_load_buffer(data, size, "fuzz.safetensors", &s, &err);
    srt_store_free(&s);
    return 0;
}
