/* GGUF v2/v3 reader: metadata and tensor directory of an mmapped file (or a caller's buffer).
 * Also usable by the tokenizer (tokenizer.ggml.* arrays) and tools. */
#ifndef SRT_GGUF_H
#define SRT_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"
#include "model/tensor_store.h"

typedef enum srt_gguf_type {
    SRT_GGUF_UINT8 = 0, SRT_GGUF_INT8, SRT_GGUF_UINT16, SRT_GGUF_INT16, SRT_GGUF_UINT32,
    SRT_GGUF_INT32, SRT_GGUF_FLOAT32, SRT_GGUF_BOOL, SRT_GGUF_STRING, SRT_GGUF_ARRAY,
    SRT_GGUF_UINT64, SRT_GGUF_INT64, SRT_GGUF_FLOAT64, SRT_GGUF_TYPE_COUNT
} srt_gguf_type;

typedef struct srt_gguf_str {
    const char *ptr;    /* into the file; not NUL-terminated */
    uint64_t    len;
} srt_gguf_str;

typedef struct srt_gguf_kv {
    char         *key;         /* NUL-terminated copy */
    srt_gguf_type type;
    srt_gguf_type arr_type;    /* for arrays */
    uint64_t      arr_n;
    const uint8_t *value;      /* scalar value or first array element, in the file */
    srt_gguf_str *arr_strs;    /* string arrays: an index of every element */
} srt_gguf_kv;

typedef struct srt_gguf_tensor_info {
    srt_gguf_str name;
    uint32_t     n_dims;
    int64_t      dims[4];      /* GGUF order: dims[0] is the innermost */
    uint32_t     ggml_type;
    uint64_t     offset;       /* from the data section start */
} srt_gguf_tensor_info;

typedef struct srt_gguf {
    srt_mapped_file       file;
    uint32_t              version;
    uint64_t              n_kv, n_tensors;
    srt_gguf_kv          *kv;
    srt_gguf_tensor_info *tensors;
    uint64_t              alignment;
    uint64_t              data_offset;
} srt_gguf;

/* Parses header, metadata and tensor directory; checks every tensor lies inside the file. */
int  srt_gguf_open(const char *path, srt_gguf **out, srt_err *err);
/* The same parser over a caller-owned buffer holding a whole GGUF file (fuzzing, tests):
 * `name` stands for the path in messages; metadata and tensors point into `data`, which must
 * outlive the srt_gguf and any store it moves into. */
int  srt_gguf_open_buffer(const void *data, size_t size, const char *name, srt_gguf **out, srt_err *err);
void srt_gguf_close(srt_gguf *g);

const srt_gguf_kv *srt_gguf_find(const srt_gguf *g, const char *key);
/* Typed getters: SRT_OK, or SRT_ERROR if absent or of a non-convertible type. */
int srt_gguf_get_i64(const srt_gguf *g, const char *key, int64_t *out);
int srt_gguf_get_f32(const srt_gguf *g, const char *key, float *out);
int srt_gguf_get_str(const srt_gguf *g, const char *key, srt_gguf_str *out);

/* Moves the tensors into a store under HF names (shape reversed to HF order). The mapped
 * file moves too: after this call the store owns it. */
int srt_gguf_to_store(srt_gguf *g, srt_tensor_store *s, srt_err *err);

#endif
