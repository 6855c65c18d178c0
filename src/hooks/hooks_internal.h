/* Private structures shared by the hook engine's files (src/hooks). */
#ifndef SRT_HOOKS_INTERNAL_H
#define SRT_HOOKS_INTERNAL_H

#include <stdint.h>

#include "srt/common.h"
#include "srt/module.h"
#include "srt_hooks.h"
#include "hooks/registry.h"
#include "srt/request.h"

/* One hook as the dispatcher sees it: everything needed for a call, copied from the
 * registration so the hot loop touches one flat array. */
typedef struct srt_hook_slot {
    srt_hook            *hook;
    const srt_hook_host *host;
    const char          *spec_name;
    int64_t              id;
    uint8_t              with_kwargs;
    uint8_t              always_call;
    uint8_t              is_global;
    uint8_t              per_request;  /* runs only for requests that selected its spec */
    uint8_t              device;       /* called through its device entry (the engine has a stream) */
    const struct srt_hook_req_table *reqs;  /* the registry's selections (per_request only) */
} srt_hook_slot;



/* Attached to srt_module.hooks: the resolved order, global hooks first. Rebuilt by the
 * registry after every mutation (between forward passes), never during a forward. */
struct srt_module_hooks {
    int            n_pre;
    int            n_post;
    srt_hook_slot *pre;
    srt_hook_slot *post;
    /* Device copies for replacement outputs on CUDA; NULL on CPU-only engines. */
    int          (*copy_d2d)(void *dst, const void *src, size_t bytes, void *ctx);
    void          *copy_ctx;
    void          *stream;      /* the backend's stream for device entries; NULL: none */
    int            host_only;   /* slots that run host code (graphs impossible) */
    uint64_t       generation;  /* the registry's generation when this list was built */
};

/* Tensor helpers (tensor_util.c). */
int64_t srt_hook_view_numel(const srt_tensor_view *v);
size_t  srt_hook_dtype_size(int32_t dtype);
int     srt_hook_view_same_layout(const srt_tensor_view *a, const srt_tensor_view *b);
int     srt_hook_view_is_contiguous(const srt_tensor_view *v);
/* A built-in forward hook object (control vectors, returned activations): calloc'd, the
 * current ABI, NULL when out of memory. */
srt_hook *srt_hook_builtin_new(srt_hook_fwd_fn forward, void *user, void (*destroy)(srt_hook *));
/* f32 -> f16, round to nearest even (host.c; also the "f16" of returned activations). */
uint16_t srt_hook_f32_to_f16(float f);
/* Copy src into dst element by element honouring both views' strides (CPU views only). */
int     srt_hook_view_copy_cpu(srt_tensor_view *dst, const srt_tensor_view *src);

/* One entry of a spec file, after type checks (spec.c). */
typedef struct srt_hook_spec {
    char  *name;            /* "" when absent */
    int    per_request;     /* runs only for requests that select it ("hooks" field) */
    char  *where;           /* "forward_hooks[2]" for messages */
    int    pre;             /* from "forward_pre_hooks" */
    int    global;
    int    prepend;
    int    always_call;
    int    with_kwargs;
    char **patterns;        /* NULL when missing or empty */
    int    n_patterns;
    char  *factory;         /* NULL when missing or empty */
    char  *config_json;     /* "{}" when absent or null */
} srt_hook_spec;

typedef struct srt_hook_spec_list {
    srt_hook_spec *specs;
    int            n;
} srt_hook_spec_list;

/* Parse and type-check a spec document; origin names it in errors. */
int  srt_hook_spec_parse(const char *json, size_t len, const char *origin,
                         srt_hook_spec_list *out, srt_err *err);
void srt_hook_spec_list_free(srt_hook_spec_list *l);

/* ['a', 'b'] as Python prints a list of strings. Returns malloc'd text. */
char *srt_hook_pylist_repr(char *const *items, int n);

/* A factory resolved to a loaded library and symbol (resolve.c). */
typedef struct srt_elf srt_elf;

typedef struct srt_hook_resolved {
    void               *lib;        /* dlopen handle; dlclose when done */
    srt_elf            *elf;        /* srt_hook_inspect_factory: the file as read (no handle) */
    srt_hook_factory_fn factory;
    char                path[4096]; /* the library that was loaded */
    char                symbol[256];
} srt_hook_resolved;

/* spec_dir: directory of the spec file or NULL; search_path: colon-separated or NULL.
 * what: prefix for error messages ("hook spec 'x' in file.json"). */
int srt_hook_resolve_factory(const char *factory, const char *spec_dir, const char *search_path,
                             const char *what, srt_hook_resolved *out, srt_err *err);
/* The same search and the same checks (library found, factory and srt_hook_abi_version
 * exported, ABI compatible) with the same messages, by reading the file: nothing of the
 * library runs. For the nginx master; out->factory stays NULL. */
int srt_hook_inspect_factory(const char *factory, const char *spec_dir, const char *search_path,
                             const char *what, srt_hook_resolved *out, srt_err *err);
void srt_hook_resolved_close(srt_hook_resolved *r);

/* ELF reading (elf_symbols.c). why gets the dynamic loader's wording ("PATH: reason"). */
int  srt_elf_open(const char *path, srt_elf **out, char *why, size_t why_cap);
int  srt_elf_symbol(const srt_elf *e, const char *name, const void **data, size_t *size);
void srt_elf_close(srt_elf *e);

/* Host services (host.c). The engine pointer of a host is its srt_hook_host_state. */
typedef struct srt_hook_host_state {
    srt_hook_host              host;
    void                      *config;     /* yajl_val of the config object */
    const struct srt_hook_device_ops *dev; /* may be NULL */
} srt_hook_host_state;

int  srt_hook_host_init(srt_hook_host_state *st, const char *spec_name, const char *spec_file,
                        const char *config_json, int tp_rank, int tp_size,
                        const struct srt_hook_device_ops *dev, srt_err *err);
void srt_hook_host_fini(srt_hook_host_state *st);

/* One live request's selections (per_request.c): which hook objects, with which config. */
typedef struct srt_hook_req {
    uint64_t            id;
    int                 n;
    char                spec[SRT_REQ_MAX_HOOKS][SRT_REQ_HOOK_NAME_MAX];  /* selected names */
    char               *config[SRT_REQ_MAX_HOOKS];
    srt_hook_host_state host[SRT_REQ_MAX_HOOKS];
} srt_hook_req;

typedef struct srt_hook_req_table {
    srt_hook_req **v;               /* entries are heap-allocated: hosts point into them */
    int           n, cap;
} srt_hook_req_table;

/* The request's entry (NULL when it selected nothing). */
const srt_hook_req *srt_hook_req_find(const srt_hook_req_table *t, uint64_t id);
void srt_hook_req_table_free(srt_hook_req_table *t);
void srt_hook_req_free(srt_hook_req *e);

#endif
