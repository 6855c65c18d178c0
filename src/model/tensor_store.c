/* mmap of checkpoint files and the name -> tensor table built from them. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/tensor_store.h"

int srt_map_file(const char *path, srt_mapped_file *out, srt_err *err)
{
    struct stat st;
    memset(out, 0, sizeof *out);
    out->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return srt_err_open(err, path, errno);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return srt_err_set(err, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return srt_err_set(err, "%s: empty file", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return srt_err_set(err, "%s: mmap failed: %s", path, strerror(errno));
    }
    out->path = strdup(path);
    out->fd = fd;
    out->data = p;
    out->size = (size_t)st.st_size;
    if (!out->path) {
        srt_unmap_file(out);
        return srt_err_set(err, "%s: out of memory", path);
    }
    return SRT_OK;
}

int srt_borrow_buffer(const void *data, size_t size, const char *name, srt_mapped_file *out, srt_err *err)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    out->path = strdup(name);
    if (!out->path)
        return srt_err_set(err, "%s: out of memory", name);
    out->data = data;
    out->size = size;
    out->borrowed = 1;
    return SRT_OK;
}

void srt_unmap_file(srt_mapped_file *f)
{
    if (f->data && !f->borrowed)
        munmap((void *)f->data, f->size);
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int srt_store_add_file(srt_tensor_store *s, const srt_mapped_file *f)
{
    srt_mapped_file *nf = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *nf);
    if (!nf)
        return SRT_ERROR;
    s->files = nf;
    s->files[s->n_files++] = *f;
    return SRT_OK;
}

int srt_store_add(srt_tensor_store *s, const srt_tensor_entry *e, srt_err *err)
{
    if (srt_store_find(s, e->name))
        return srt_err_set(err, "%s: tensor '%s' appears twice", e->file, e->name);
    if (s->n_tensors == s->cap_tensors) {
        int32_t cap = s->cap_tensors ? s->cap_tensors * 2 : 256;
        srt_tensor_entry *nt = realloc(s->tensors, (size_t)cap * sizeof *nt);
        if (!nt)
            return srt_err_set(err, "%s: out of memory", e->file);
        s->tensors = nt;
        s->cap_tensors = cap;
    }
    srt_tensor_entry *d = &s->tensors[s->n_tensors];
    *d = *e;
    d->name = strdup(e->name);
    if (!d->name)
        return srt_err_set(err, "%s: out of memory", e->file);
    s->n_tensors++;
    return SRT_OK;
}

const srt_tensor_entry *srt_store_find(const srt_tensor_store *s, const char *name)
{
    /* Linear: a few hundred tensors, looked up once at load. */
    for (int32_t i = 0; i < s->n_tensors; i++)
        if (strcmp(s->tensors[i].name, name) == 0)
            return &s->tensors[i];
    return NULL;
}

void srt_store_free(srt_tensor_store *s)
{
    for (int32_t i = 0; i < s->n_tensors; i++)
        free(s->tensors[i].name);
    free(s->tensors);
    for (int32_t i = 0; i < s->n_files; i++)
        srt_unmap_file(&s->files[i]);
    free(s->files);
    memset(s, 0, sizeof *s);
}

int srt_tensor_nbytes(srt_dtype t, const int64_t *shape, int ndim, size_t *out)
{
    const uint64_t limit = (uint64_t)1 << 48;
    uint64_t n = 1;
    if (ndim < 0 || ndim > 4 || t < 0 || t >= SRT_DTYPE_COUNT)
        return SRT_ERROR;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > limit)
            return SRT_ERROR;
        n *= (uint64_t)shape[i];
        if (n > limit)
            return SRT_ERROR;
    }
    int64_t inner = ndim ? shape[ndim - 1] : 1;
    int be = srt_dtype_block_elems(t);
    if (be <= 0 || inner % be != 0)
        return SRT_ERROR;
    *out = (size_t)(n / (uint64_t)be) * srt_dtype_block_bytes(t);
    return SRT_OK;
}
