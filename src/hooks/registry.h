/* The hook registry: which hooks are attached to which module, with removable handles.
 *
 * Who calls what:
 *   - the model runner (scheduler process, one registry per TP rank) creates a registry over
 *     the model's module list, loads the srt_forward_hooks file, and frees it with the model;
 *   - the scheduler applies admin requests (list, remove, re-add, delete) between forward
 *     passes;
 *   - nginx (master, at `nginx -t` and startup) calls srt_hook_spec_check_file() to refuse a
 *     broken spec file before any model is loaded.
 *
 * Threading rule: a registry is not locked. Every call below must come from the thread that
 * runs the forward passes (the scheduler thread), never while a forward pass is running.
 * Mutations rewrite module->hooks; the forward pass reads it without synchronisation.
 */
#ifndef SRT_HOOKS_REGISTRY_H
#define SRT_HOOKS_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"
#include "srt/module.h"
#include "srt/request.h"

typedef struct srt_hook_registry srt_hook_registry;

/* Device memory copies, installed by a CUDA backend so hooks can read device activations
 * (host->tensor_read_f32) and replacement outputs can be copied on the device. */
typedef struct srt_hook_device_ops {
    int (*copy_d2h)(void *dst, const void *src, size_t bytes, void *ctx);
    int (*copy_h2d)(void *dst, const void *src, size_t bytes, void *ctx);
    int (*copy_d2d)(void *dst, const void *src, size_t bytes, void *ctx);
    void *ctx;
    void *stream;   /* the backend's stream (a cudaStream_t): hooks' device entries enqueue on it */
} srt_hook_device_ops;

/* A registry over the model's modules, in named_modules() order. The modules must outlive
 * the registry; their hooks fields are owned by it (set to NULL here and at free): use one
 * registry per module array. */
srt_hook_registry *srt_hook_registry_create(srt_module *modules, int n, srt_err *err);

/* The general form: (name, module) pairs as named_modules(remove_duplicate=False) yields
 * them. A module appearing under several names is registered once, under its first name,
 * exactly as named_modules() de-duplicates. names[i] may be NULL to use modules[i]->info.name. */
srt_hook_registry *srt_hook_registry_create_named(srt_module **modules, const char **names,
                                                  int n, srt_err *err);

/* Frees every registration, calls each hook's destroy once, unloads the libraries and
 * resets module->hooks to NULL. */
void srt_hook_registry_free(srt_hook_registry *reg);

/* Directories searched for "libx.so:symbol" and dotted factories, colon-separated, after
 * the spec file's directory. NULL means the SRT_HOOKS_PATH environment variable. */
int  srt_hook_registry_set_search_path(srt_hook_registry *reg, const char *path, srt_err *err);
/* This rank, as factories see it in host->tp_rank/tp_size: set before loading. */
void srt_hook_registry_set_tp(srt_hook_registry *reg, int tp_rank, int tp_size);
void srt_hook_registry_set_device_ops(srt_hook_registry *reg, const srt_hook_device_ops *ops);
/* Hooks on a backend with memory of its own: install its download / upload / copy, and its
 * stream (backend op `stream`), through which hooks with a device entry are then called. */
struct srt_backend;
void srt_hook_registry_use_backend(srt_hook_registry *reg, struct srt_backend *be);
/* After the device ops are settled: an error naming the first hook that has only a device
 * entry when the registry has no stream (it could never run). */
int  srt_hook_registry_check_entries(const srt_hook_registry *reg, srt_err *err);

/* Load a spec file {"forward_hooks": [...], "forward_pre_hooks": [...]} (or a bare list,
 * the form SGLang's --forward-hooks takes). All or nothing: on a fatal error nothing from
 * the file stays registered, every hook created so far is destroyed, and err names the
 * file, the spec and the field. Warnings (seed 000's non-fatal cases) go to srt_log. */
int srt_hook_registry_load_file(srt_hook_registry *reg, const char *path, srt_err *err);
/* Same from JSON text; origin names it in messages ("srt_forward_hooks" or a file name). */
int srt_hook_registry_load_json(srt_hook_registry *reg, const char *json, size_t len,
                                const char *origin, srt_err *err);

/* For `nginx -t` (the master, often root): parse the file and check every factory by
 * reading its library (found as the loader would, exported factory and
 * srt_hook_abi_version, ABI value) without loading it, calling any factory or needing a
 * model. search_path as above (NULL: env). */
int srt_hook_spec_check_file(const char *path, const char *search_path, srt_err *err);

/* Attach a hook object directly (C embedders and tests). module_name is an exact module
 * name, or NULL with opts->global. Takes ownership of hook (destroy is called on failure
 * too). Returns the new handle id (> 0) or -1. */
typedef struct srt_hook_attach_opts {
    const char *name;        /* spec name for logs and listings */
    int         pre;         /* forward pre-hook instead of forward hook */
    int         global;      /* every module, before module hooks */
    int         prepend;
    int         always_call; /* forward hooks only */
    int         with_kwargs;
    int         per_request; /* runs only for requests that select it (srt_hook_request_begin) */
} srt_hook_attach_opts;
int64_t srt_hook_attach(srt_hook_registry *reg, const char *module_name, srt_hook *hook,
                        const srt_hook_attach_opts *opts, srt_err *err);

/* Handles. remove detaches a registration but keeps it (and its hook) so re-add can put
 * it back at its original place in the order; delete drops it for good and destroys the
 * hook once no registration uses it. Unknown ids are errors. */
int srt_hook_remove(srt_hook_registry *reg, int64_t id, srt_err *err);
int srt_hook_readd(srt_hook_registry *reg, int64_t id, srt_err *err);
int srt_hook_delete(srt_hook_registry *reg, int64_t id, srt_err *err);
/* The same for every registration of a spec name; returns how many changed, -1 if none. */
int srt_hook_remove_spec(srt_hook_registry *reg, const char *spec_name, srt_err *err);
int srt_hook_readd_spec(srt_hook_registry *reg, const char *spec_name, srt_err *err);

/* JSON for the admin location:
 * {"generation":N,"active":N,"hooks":[{"id":1,"name":"..","type":"forward"|"forward_pre",
 *   "module":"model.layers.0.mlp"|"*","global":false,"active":true,"prepend":false,
 *   "always_call":false,"with_kwargs":false,"factory":"..","source":".."}, ...]}
 * *out is malloc'd; the caller frees it. */
int srt_hook_registry_list_json(srt_hook_registry *reg, char **out, size_t *len, srt_err *err);

/* Number of active registrations (0: every module->hooks is NULL). A runner that replays
 * CUDA graphs runs a batch eagerly whenever this is non-zero. */
int      srt_hook_registry_active(const srt_hook_registry *reg);
/* Changes on every mutation, so a runner can notice that hooks changed. */
uint64_t srt_hook_registry_generation(const srt_hook_registry *reg);

/* For nginx -t (srt_request_hooks): 1 when the spec file has a spec named `name` with
 * "per_request": true, 0 when not, SRT_ERROR when it cannot be read or parsed. */
int srt_hook_spec_file_has_per_request(const char *path, const char *name, srt_err *err);

/* Per-request hooks. A spec with "per_request": true runs only for the tokens of requests
 * that selected it, each call seeing one request's rows and its config (srt_hooks.h, ABI
 * 1.1). The scheduler calls begin when it takes a request with a selection (an error names
 * a name that is not a per-request spec: the request then fails) and end when it finishes;
 * both between forward passes. reg may be NULL (no hooks): begin fails for any selection. */
int  srt_hook_request_begin(srt_hook_registry *reg, uint64_t request_id,
                            const srt_request_hooks *sel, srt_err *err);
void srt_hook_request_end(srt_hook_registry *reg, uint64_t request_id);
/* 1 when request_id has a live selection (begin succeeded with at least one hook). */
int  srt_hook_request_selected(const srt_hook_registry *reg, uint64_t request_id);

/* Control vectors (srt_control_vector): llama.cpp's control-vector GGUF ("direction.N", F32,
 * N >= 1) added, times scale, to the output of model.layers.N for N in
 * [max(layer_start, 1), min(layer_end, n_layers - 1)] (<= 0: llama.cpp's defaults), as
 * llama.cpp's --control-vector-scaled and --control-vector-layer-range do. Registered as a
 * forward hook per layer under one spec name (default "control_vector"); per_request: only
 * for requests selecting that name, whose config may set "scale". */
typedef struct srt_control_vector_opts {
    const char *path;
    const char *name;
    float       scale;
    int         layer_start, layer_end;
    int         per_request;
} srt_control_vector_opts;
int srt_hook_control_vector_load(srt_hook_registry *reg, const srt_control_vector_opts *o,
                                 int n_layers, srt_err *err);
/* For nginx -t: the file is a control vector (directions parse, sizes agree). */
int srt_hook_control_vector_check(const char *path, srt_err *err);

/* Python fnmatch.fnmatch semantics on POSIX: '*' crosses '.', no escapes, case-sensitive. */
int srt_hook_fnmatch(const char *pattern, const char *name);

#endif
