/* The named tensors of a checkpoint, whatever file format they came from.
 * Names are HF names; shapes are in HF order (outermost first). Data points into
 * read-only mmapped files owned by the store. */
#ifndef SRT_TENSOR_STORE_H
#define SRT_TENSOR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"
#include "srt/tensor.h"

typedef struct srt_mapped_file {
    char       *path;
    int         fd;
    const void *data;
    size_t      size;
    int         borrowed;    /* data is the caller's buffer (a *_buffer entry point): never unmapped */
} srt_mapped_file;

typedef struct srt_tensor_entry {
    char       *name;
    srt_dtype   dtype;
    int32_t     ndim;
    int64_t     shape[4];
    const void *data;
    size_t      nbytes;
    const char *file;        /* path of the file holding it, for messages */
    char        stored_type[16];  /* the file's own type name, when dtype is SRT_DTYPE_COUNT (unsupported) */
} srt_tensor_entry;

typedef struct srt_tensor_store {
    srt_mapped_file  *files;
    int32_t           n_files;
    srt_tensor_entry *tensors;
    int32_t           n_tensors, cap_tensors;
} srt_tensor_store;

int  srt_map_file(const char *path, srt_mapped_file *out, srt_err *err);
/* A caller-owned buffer dressed as a mapped file: `name` stands for the path in messages
 * (copied); `data` is borrowed and must outlive every user of the result. */
int  srt_borrow_buffer(const void *data, size_t size, const char *name, srt_mapped_file *out, srt_err *err);
void srt_unmap_file(srt_mapped_file *f);

int  srt_store_add_file(srt_tensor_store *s, const srt_mapped_file *f);  /* takes ownership */
int  srt_store_add(srt_tensor_store *s, const srt_tensor_entry *e, srt_err *err);
const srt_tensor_entry *srt_store_find(const srt_tensor_store *s, const char *name);
void srt_store_free(srt_tensor_store *s);

/* Bytes of n elements of a dtype with overflow and block checks; 0 and an error on failure. */
int  srt_tensor_nbytes(srt_dtype t, const int64_t *shape, int ndim, size_t *out);

/* Loaders fill a store. Safetensors: one file, or every shard named by an index. */
int srt_safetensors_load(const char *path, srt_tensor_store *s, srt_err *err);
/* The same parser over a caller-owned buffer holding a whole safetensors file (fuzzing, tests):
 * `name` stands for the path in messages; the store's tensors point into `data`, which must
 * outlive the store. */
int srt_safetensors_load_buffer(const void *data, size_t size, const char *name, srt_tensor_store *s,
                                srt_err *err);
int srt_safetensors_load_index(const char *dir, const char *index_path, srt_tensor_store *s,
                               srt_err *err);

#endif
