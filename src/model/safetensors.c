/* safetensors: 8-byte little-endian header length, a JSON header, then raw tensor data.
 * Sharded checkpoints name their shards in model.safetensors.index.json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_tree.h>

#include "model/tensor_store.h"

static int st_dtype(const char *s, srt_dtype *out, size_t *elsize)
{
    if (strcmp(s, "F32") == 0)  { *out = SRT_F32;  *elsize = 4; return SRT_OK; }
    if (strcmp(s, "F16") == 0)  { *out = SRT_F16;  *elsize = 2; return SRT_OK; }
    if (strcmp(s, "BF16") == 0) { *out = SRT_BF16; *elsize = 2; return SRT_OK; }
    if (strcmp(s, "I32") == 0)  { *out = SRT_I32;  *elsize = 4; return SRT_OK; }
    return SRT_ERROR;
}

static int get_u64(yajl_val v, uint64_t *out)
{
    if (!v || !YAJL_IS_INTEGER(v) || YAJL_GET_INTEGER(v) < 0)
        return SRT_ERROR;
    *out = (uint64_t)YAJL_GET_INTEGER(v);
    return SRT_OK;
}

static int add_tensor(srt_tensor_store *s, const srt_mapped_file *f, const uint8_t *data, uint64_t data_size,
                      const char *name, yajl_val info, srt_err *err)
{
    const char *path = f->path;
    const char *dk[] = { "dtype", NULL }, *sk[] = { "shape", NULL }, *ok[] = { "data_offsets", NULL };
    yajl_val dt = yajl_tree_get(info, dk, yajl_t_string);
    yajl_val sh = yajl_tree_get(info, sk, yajl_t_array);
    yajl_val of = yajl_tree_get(info, ok, yajl_t_array);
    srt_tensor_entry e = { 0 };
    size_t elsize = 0;
    uint64_t begin, end, n = 1;

    if (!YAJL_IS_OBJECT(info) || !dt || !sh || !of)
        return srt_err_set(err, "%s: tensor '%s': header entry lacks dtype, shape or data_offsets", path, name);
    e.name = (char *)name;
    e.file = path;
    if (st_dtype(YAJL_GET_STRING(dt), &e.dtype, &elsize) != SRT_OK) {
        e.dtype = SRT_DTYPE_COUNT;
        snprintf(e.stored_type, sizeof e.stored_type, "%s", YAJL_GET_STRING(dt));
    }
    if (sh->u.array.len > 4)
        return srt_err_set(err, "%s: tensor '%s' has %zu dimensions (at most 4 supported)", path, name,
                           sh->u.array.len);
    e.ndim = (int32_t)sh->u.array.len;
    for (int i = 0; i < e.ndim; i++) {
        uint64_t d;
        if (get_u64(sh->u.array.values[i], &d) != SRT_OK || d > ((uint64_t)1 << 40))
            return srt_err_set(err, "%s: tensor '%s': bad shape entry %d", path, name, i);
        e.shape[i] = (int64_t)d;
        n *= d;
        if (n > ((uint64_t)1 << 48))
            return srt_err_set(err, "%s: tensor '%s': shape too large", path, name);
    }
    if (of->u.array.len != 2 || get_u64(of->u.array.values[0], &begin) != SRT_OK ||
        get_u64(of->u.array.values[1], &end) != SRT_OK || end < begin)
        return srt_err_set(err, "%s: tensor '%s': bad data_offsets", path, name);
    if (end > data_size)
        return srt_err_set(err, "%s: tensor '%s': data [%llu, %llu) lies past the end of the file (%llu data bytes): truncated?",
                           path, name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
    if (e.dtype != SRT_DTYPE_COUNT && end - begin != n * elsize)
        return srt_err_set(err, "%s: tensor '%s': %llu bytes of data for %llu elements of %s",
                           path, name, (unsigned long long)(end - begin), (unsigned long long)n, YAJL_GET_STRING(dt));
    e.data = data + begin;
    e.nbytes = (size_t)(end - begin);
    return srt_store_add(s, &e, err);
}

/* The parser behind both entry points: f holds the bytes (mapped or borrowed); the store takes
 * it on success, and it is released on failure. */
static int load_file(srt_mapped_file f, srt_tensor_store *s, srt_err *err)
{
    const char *path = f.path;
    uint64_t hlen;
    char ebuf[256];

    if (f.size < 8) {
        srt_err_set(err, "%s: truncated safetensors file (%zu bytes)", path, f.size);
        goto fail;
    }
    memcpy(&hlen, f.data, 8);
    if (hlen < 2 || hlen > f.size - 8 || hlen > ((uint64_t)1 << 30)) {
        srt_err_set(err, "%s: corrupt safetensors header length %llu (file is %zu bytes)", path,
                    (unsigned long long)hlen, f.size);
        goto fail;
    }
    char *json = malloc(hlen + 1);
    if (!json) {
        srt_err_set(err, "%s: out of memory", path);
        goto fail;
    }
    memcpy(json, (const char *)f.data + 8, hlen);
    json[hlen] = 0;
    yajl_val root = NULL;
    if (srt_json_depth(json, hlen) > SRT_JSON_MAX_DEPTH)
        snprintf(ebuf, sizeof ebuf, "nested deeper than %d levels", SRT_JSON_MAX_DEPTH);
    else
        root = yajl_tree_parse(json, ebuf, sizeof ebuf);
    free(json);
    if (!root || !YAJL_IS_OBJECT(root)) {
        char *nl = strchr(ebuf, '\n');
        if (nl)
            *nl = 0;
        srt_err_set(err, "%s: safetensors header is not a JSON object: %s", path, root ? "" : ebuf);
        yajl_tree_free(root);
        goto fail;
    }
    if (srt_store_add_file(s, &f) != SRT_OK) {
        srt_err_set(err, "%s: out of memory", path);
        yajl_tree_free(root);
        goto fail;
    }
    const srt_mapped_file *sf = &s->files[s->n_files - 1];
    const uint8_t *data = (const uint8_t *)sf->data + 8 + hlen;
    uint64_t data_size = sf->size - 8 - hlen;
    int rc = SRT_OK;
    for (size_t i = 0; i < root->u.object.len && rc == SRT_OK; i++) {
        const char *name = root->u.object.keys[i];
        if (strcmp(name, "__metadata__") == 0)
            continue;
        rc = add_tensor(s, sf, data, data_size, name, root->u.object.values[i], err);
    }
    yajl_tree_free(root);
    return rc;
fail:
    /* path is f.path: every message is written before this frees it */
    srt_unmap_file(&f);
    return SRT_ERROR;
}

int srt_safetensors_load(const char *path, srt_tensor_store *s, srt_err *err)
{
    srt_mapped_file f;
    if (srt_map_file(path, &f, err) != SRT_OK)
        return SRT_ERROR;
    return load_file(f, s, err);
}

int srt_safetensors_load_buffer(const void *data, size_t size, const char *name, srt_tensor_store *s,
                                srt_err *err)
{
    srt_mapped_file f;
    if (srt_borrow_buffer(data, size, name, &f, err) != SRT_OK)
        return SRT_ERROR;
    return load_file(f, s, err);
}

int srt_safetensors_load_index(const char *dir, const char *index_path, srt_tensor_store *s, srt_err *err)
{
    char ebuf[256];
    char *json;
    if (srt_read_file(index_path, 64u << 20, &json, NULL, err) != SRT_OK)
        return SRT_ERROR;
    yajl_val root = srt_json_depth(json, strlen(json)) > SRT_JSON_MAX_DEPTH
                        ? NULL : yajl_tree_parse(json, ebuf, sizeof ebuf);
    free(json);
    const char *wk[] = { "weight_map", NULL };
    yajl_val wm = root ? yajl_tree_get(root, wk, yajl_t_object) : NULL;
    if (!wm) {
        yajl_tree_free(root);
        return srt_err_set(err, "%s: not a safetensors index (no \"weight_map\" object)", index_path);
    }
    /* load each distinct shard once, in first-mention order */
    int rc = SRT_OK;
    for (size_t i = 0; i < wm->u.object.len && rc == SRT_OK; i++) {
        yajl_val fv = wm->u.object.values[i];
        if (!YAJL_IS_STRING(fv)) {
            rc = srt_err_set(err, "%s: weight_map entry '%s' is not a file name", index_path, wm->u.object.keys[i]);
            break;
        }
        const char *fname = fv->u.string;
        if (strchr(fname, '/') || strcmp(fname, "..") == 0) {
            rc = srt_err_set(err, "%s: shard name '%s' must be a plain file name", index_path, fname);
            break;
        }
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) {
            const char *prev = wm->u.object.values[j]->u.string;   /* entries before i are strings */
            seen = prev && strcmp(prev, fname) == 0;
        }
        if (seen)
            continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, fname) >= (int)sizeof path) {
            rc = srt_err_set(err, "%s: shard path too long", index_path);
            break;
        }
        rc = srt_safetensors_load(path, s, err);
    }
    /* every tensor the index names must be in its shard */
    for (size_t i = 0; i < wm->u.object.len && rc == SRT_OK; i++)
        if (!srt_store_find(s, wm->u.object.keys[i]))
            rc = srt_err_set(err, "%s: tensor '%s' is listed in the index but missing from shard %s",
                             index_path, wm->u.object.keys[i], YAJL_GET_STRING(wm->u.object.values[i]));
    yajl_tree_free(root);
    return rc;
}
