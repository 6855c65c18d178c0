/* The hook registry: registrations with ids, their order, and the per-module lists the
 * dispatcher reads.
 *
 * Loading a spec follows SGLang's register_forward_hooks() step by step (and its log
 * lines), with PyTorch's options on top. Every mutation rebuilds module->hooks for all
 * modules: cheap (a few hundred modules) and it keeps the hot path a flat array walk. */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_gen.h>

#include "hooks/hooks_internal.h"
#include "srt/backend.h"

#define SPEC_FILE_MAX (16 << 20)

/* One factory call: the hook object shared by every registration of one spec. */
typedef struct hook_obj {
    struct hook_obj    *next;
    srt_hook           *hook;
    srt_hook_host_state host;
    char               *spec_name;
    char               *factory;
    char               *source;
    char               *config_json;
    void               *lib;
    int                 refs;       /* registrations not deleted */
    int                 per_request;
} hook_obj;

typedef struct hook_reg {
    int64_t   id;
    int64_t   order;                /* sort key: appended > 0 ascending, prepended < 0 */
    hook_obj *obj;
    int       module;               /* index into mods, -1 for a global hook */
    uint8_t   pre, global, prepend, always_call, with_kwargs, active;
} hook_reg;

struct srt_hook_registry {
    int                 n;
    srt_module        **mods;       /* unique modules, named_modules() order */
    char              **names;      /* first name of each */
    hook_reg           *regs;
    int                 n_regs;
    int                 cap_regs;
    hook_obj           *objs;
    int64_t             next_id;
    int64_t             next_seq;
    uint64_t            generation;
    char               *search_path;
    int                 has_search_path;
    int                 tp_rank;
    int                 tp_size;
    int                 n_active;
    srt_hook_device_ops dev;
    srt_hook_req_table  reqs;       /* live requests' per-request selections */
};

/* ---- creation ------------------------------------------------------------------------ */

srt_hook_registry *srt_hook_registry_create_named(srt_module **modules, const char **names,
                                                  int n, srt_err *err)
{
    srt_hook_registry *reg;

    if (n < 0 || (n > 0 && modules == NULL)) {
        srt_err_set(err, "hook registry: invalid module list");
        return NULL;
    }
    reg = calloc(1, sizeof *reg);
    if (reg == NULL || (n > 0 && ((reg->mods = calloc((size_t)n, sizeof *reg->mods)) == NULL ||
                                  (reg->names = calloc((size_t)n, sizeof *reg->names)) == NULL)))
        goto oom;
    reg->next_id = 1;
    reg->next_seq = 1;
    reg->tp_size = 1;
    for (int i = 0; i < n; i++) {
        srt_module *m = modules[i];
        const char *name = names && names[i] ? names[i] : (m ? m->info.name : NULL);
        int dup = 0;

        if (m == NULL || name == NULL) {
            srt_err_set(err, "hook registry: module %d has no object or no name", i);
            srt_hook_registry_free(reg);
            return NULL;
        }
        /* named_modules() yields a module once, under the first name it is reached by. */
        for (int j = 0; j < reg->n && !dup; j++)
            dup = reg->mods[j] == m;
        if (dup)
            continue;
        for (int j = 0; j < reg->n; j++) {
            if (strcmp(reg->names[j], name) == 0) {
                srt_err_set(err, "hook registry: two different modules are named '%s'", name);
                srt_hook_registry_free(reg);
                return NULL;
            }
        }
        m->hooks = NULL;
        reg->mods[reg->n] = m;
        reg->names[reg->n] = strdup(name);
        if (reg->names[reg->n] == NULL)
            goto oom;
        reg->n++;
    }
    return reg;

oom:
    srt_err_set(err, "hook registry: out of memory");
    srt_hook_registry_free(reg);
    return NULL;
}

srt_hook_registry *srt_hook_registry_create(srt_module *modules, int n, srt_err *err)
{
    srt_hook_registry *reg;
    srt_module **ptrs;

    if (n < 0 || (n > 0 && modules == NULL)) {
        srt_err_set(err, "hook registry: invalid module list");
        return NULL;
    }
    ptrs = malloc((size_t)(n > 0 ? n : 1) * sizeof *ptrs);
    if (ptrs == NULL) {
        srt_err_set(err, "hook registry: out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        ptrs[i] = &modules[i];
    reg = srt_hook_registry_create_named(ptrs, NULL, n, err);
    free(ptrs);
    return reg;
}

int srt_hook_registry_set_search_path(srt_hook_registry *reg, const char *path, srt_err *err)
{
    char *copy = NULL;

    if (path && (copy = strdup(path)) == NULL)
        return srt_err_set(err, "out of memory");
    free(reg->search_path);
    reg->search_path = copy;
    reg->has_search_path = path != NULL;
    return SRT_OK;
}

void srt_hook_registry_set_tp(srt_hook_registry *reg, int tp_rank, int tp_size)
{
    reg->tp_rank = tp_rank;
    reg->tp_size = tp_size > 0 ? tp_size : 1;
}

static int rebuild(srt_hook_registry *reg, srt_err *err);

void srt_hook_registry_set_device_ops(srt_hook_registry *reg, const srt_hook_device_ops *ops)
{
    srt_err err;

    if (ops)
        reg->dev = *ops;
    else
        memset(&reg->dev, 0, sizeof reg->dev);
    /* which entry each slot runs depends on the stream: the lists are rebuilt; if that runs
     * out of memory, the old lists stay, with the new copies and no device entries */
    if (rebuild(reg, &err) != SRT_OK)
        for (int i = 0; i < reg->n; i++)
            if (reg->mods[i]->hooks) {
                struct srt_module_hooks *h = reg->mods[i]->hooks;
                h->copy_d2d = reg->dev.copy_d2d;
                h->copy_ctx = reg->dev.ctx;
                h->stream = NULL;
                h->host_only = 0;
                for (int k = 0; k < h->n_pre + h->n_post; k++) {
                    h->pre[k].device = 0;
                    h->host_only++;
                }
            }
}

int srt_hook_registry_check_entries(const srt_hook_registry *reg, srt_err *err)
{
    for (int i = 0; reg && i < reg->n_regs; i++) {
        const hook_reg *r = &reg->regs[i];
        const srt_hook *h = r->obj->hook;
        if (reg->dev.stream == NULL && (r->pre ? h->forward_pre == NULL : h->forward == NULL))
            return srt_err_set(err, "hook spec '%s' (%s): its hook has only a device entry (%s) and "
                               "this model runs without a device stream (the CPU backend)",
                               r->obj->spec_name, r->obj->factory,
                               r->pre ? "forward_pre_device" : "forward_device");
    }
    return SRT_OK;
}

/* ---- hook objects ---------------------------------------------------------------------- */

static void obj_free(srt_hook_registry *reg, hook_obj *o)
{
    for (hook_obj **pp = &reg->objs; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    if (o->hook && o->hook->destroy)
        o->hook->destroy(o->hook);
    srt_hook_host_fini(&o->host);
    if (o->lib)
        dlclose(o->lib);
    free(o->spec_name);
    free(o->factory);
    free(o->source);
    free(o->config_json);
    free(o);
}

static void obj_release(srt_hook_registry *reg, hook_obj *o)
{
    if (--o->refs <= 0)
        obj_free(reg, o);
}

static hook_obj *obj_new(srt_hook_registry *reg, const char *spec_name, const char *factory,
                         const char *source, const char *config_json, srt_err *err)
{
    hook_obj *o = calloc(1, sizeof *o);

    if (o == NULL)
        goto oom;
    o->spec_name = strdup(spec_name ? spec_name : "");
    o->factory = strdup(factory ? factory : "");
    o->source = strdup(source ? source : "");
    o->config_json = strdup(config_json ? config_json : "{}");
    if (!o->spec_name || !o->factory || !o->source || !o->config_json)
        goto oom;
    if (srt_hook_host_init(&o->host, o->spec_name, o->source, o->config_json, reg->tp_rank,
                           reg->tp_size, &reg->dev, err) != SRT_OK) {
        o->next = NULL;
        obj_free(reg, o);
        return NULL;
    }
    o->next = reg->objs;
    reg->objs = o;
    return o;

oom:
    srt_err_set(err, "out of memory");
    if (o) {
        free(o->spec_name);
        free(o->factory);
        free(o->source);
        free(o->config_json);
        free(o);
    }
    return NULL;
}

/* The object a factory returned must speak our ABI and have the callback its list needs. */
/* The hook's device entry for its kind, or NULL (a 1.0 hook has none). */
static int has_device_entry(const srt_hook *h, int pre)
{
    return pre ? SRT_HOOK_HAS(h, forward_pre_device) && h->forward_pre_device != NULL
               : SRT_HOOK_HAS(h, forward_device) && h->forward_device != NULL;
}

static int check_hook_object(const srt_hook *h, int pre, int per_request, const char *what,
                             const char *factory, srt_err *err)
{
    if (!srt_hook_abi_compatible(h->abi_version))
        return srt_err_set(err, "%s: hook factory '%s' returned a hook built for hook ABI "
                           "%u.%u; this server runs hook ABI %d.%d, refusing it", what, factory,
                           h->abi_version >> 16, h->abi_version & 0xffffu,
                           SRT_HOOK_ABI_VERSION_MAJOR, SRT_HOOK_ABI_VERSION_MINOR);
    /* a 1.0 hook is shorter than ours: its 1.1 fields are not read (SRT_HOOK_HAS) */
    if (h->struct_size < SRT_HOOK_STRUCT_SIZE_1_0)
        return srt_err_set(err, "%s: hook factory '%s' returned a hook with struct_size %u, "
                           "expected at least %u", what, factory, h->struct_size,
                           SRT_HOOK_STRUCT_SIZE_1_0);
    if (pre && h->forward_pre == NULL && !has_device_entry(h, 1))
        return srt_err_set(err, "%s: hook factory '%s' returned a hook without a forward_pre "
                           "callback, but the spec is in forward_pre_hooks", what, factory);
    if (!pre && h->forward == NULL && !has_device_entry(h, 0))
        return srt_err_set(err, "%s: hook factory '%s' returned a hook without a forward "
                           "callback, but the spec is in forward_hooks", what, factory);
    /* a per-request hook runs on one request's rows, which change every step: host code */
    if (per_request && (pre ? h->forward_pre == NULL : h->forward == NULL))
        return srt_err_set(err, "%s: hook factory '%s' returned a hook with only a device "
                           "entry, but per-request hooks run through the host entry (%s)", what,
                           factory, pre ? "forward_pre" : "forward");
    return SRT_OK;
}

/* ---- registrations and the per-module lists ------------------------------------------- */

static hook_reg *reg_add(srt_hook_registry *reg, hook_obj *o, int module, int pre, int global,
                         int prepend, int always_call, int with_kwargs, srt_err *err)
{
    hook_reg *r;

    if (reg->n_regs == reg->cap_regs) {
        int cap = reg->cap_regs ? reg->cap_regs * 2 : 16;
        hook_reg *grown = realloc(reg->regs, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            srt_err_set(err, "out of memory");
            return NULL;
        }
        reg->regs = grown;
        reg->cap_regs = cap;
    }
    r = &reg->regs[reg->n_regs++];
    memset(r, 0, sizeof *r);
    r->id = reg->next_id++;
    r->order = prepend ? -reg->next_seq : reg->next_seq;
    reg->next_seq++;
    r->obj = o;
    r->module = module;
    r->pre = (uint8_t)pre;
    r->global = (uint8_t)global;
    r->prepend = (uint8_t)prepend;
    r->always_call = (uint8_t)always_call;
    r->with_kwargs = (uint8_t)with_kwargs;
    r->active = 1;
    o->refs++;
    return r;
}

static int cmp_order(const void *a, const void *b)
{
    const hook_reg *x = *(hook_reg *const *)a, *y = *(hook_reg *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void fill_slot(const srt_hook_registry *reg, srt_hook_slot *s, const hook_reg *r)
{
    s->per_request = (uint8_t)r->obj->per_request;
    s->reqs = &reg->reqs;
    s->hook = r->obj->hook;
    s->host = &r->obj->host.host;
    s->spec_name = r->obj->spec_name;
    s->id = r->id;
    s->with_kwargs = r->with_kwargs;
    s->always_call = r->always_call;
    s->is_global = r->global;
    /* the device entry wherever the engine has a stream, eager steps included, so that what
     * a graph replays is what an eager step does */
    s->device = reg->dev.stream != NULL && !r->obj->per_request && has_device_entry(s->hook, r->pre);
}

/* Recompute module->hooks from the active registrations. On failure nothing changes. */
static int rebuild(srt_hook_registry *reg, srt_err *err)
{
    struct srt_module_hooks **fresh = NULL;
    hook_reg **sorted = NULL;
    int *n_pre = NULL, *n_post = NULL;
    int n_sorted = 0, g_pre = 0, g_post = 0, rc = SRT_ERROR;

    if (reg->n == 0)
        goto done_ok;
    fresh = calloc((size_t)reg->n, sizeof *fresh);
    n_pre = calloc((size_t)reg->n, sizeof *n_pre);
    n_post = calloc((size_t)reg->n, sizeof *n_post);
    sorted = malloc((size_t)(reg->n_regs ? reg->n_regs : 1) * sizeof *sorted);
    if (!fresh || !n_pre || !n_post || !sorted)
        goto oom;

    for (int i = 0; i < reg->n_regs; i++) {
        hook_reg *r = &reg->regs[i];
        if (!r->active)
            continue;
        sorted[n_sorted++] = r;
        if (r->global)
            *(r->pre ? &g_pre : &g_post) += 1;
        else
            (r->pre ? n_pre : n_post)[r->module]++;
    }
    qsort(sorted, (size_t)n_sorted, sizeof *sorted, cmp_order);

    for (int m = 0; m < reg->n; m++) {
        int np = g_pre + n_pre[m], nq = g_post + n_post[m], ip = 0, iq = 0;
        struct srt_module_hooks *h;

        if (np + nq == 0)
            continue;
        h = malloc(sizeof *h + (size_t)(np + nq) * sizeof(srt_hook_slot));
        if (h == NULL)
            goto oom;
        fresh[m] = h;
        h->n_pre = np;
        h->n_post = nq;
        h->pre = (srt_hook_slot *)(h + 1);
        h->post = h->pre + np;
        h->copy_d2d = reg->dev.copy_d2d;
        h->copy_ctx = reg->dev.ctx;
        h->stream = reg->dev.stream;
        h->host_only = 0;
        h->generation = reg->generation + 1;   /* the value it has once rebuilt */
        /* Global hooks first, then the module's own; each group in registration order. */
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < n_sorted; k++) {
                hook_reg *r = sorted[k];
                srt_hook_slot *slot;
                if (pass == 0 ? !r->global : (r->global || r->module != m))
                    continue;
                slot = r->pre ? &h->pre[ip++] : &h->post[iq++];
                fill_slot(reg, slot, r);
                h->host_only += !slot->device;
            }
    }
    for (int m = 0; m < reg->n; m++) {
        free(reg->mods[m]->hooks);
        reg->mods[m]->hooks = fresh[m];
    }
done_ok:
    reg->n_active = n_sorted;
    reg->generation++;
    rc = SRT_OK;
    goto out;
oom:
    srt_err_set(err, "hook registry: out of memory while rebuilding hook lists");
    if (fresh)
        for (int m = 0; m < reg->n; m++)
            free(fresh[m]);
out:
    free(fresh);
    free(n_pre);
    free(n_post);
    free(sorted);
    return rc;
}

/* Drop registrations [from, n_regs) (a failed load), releasing their objects. */
static void truncate_regs(srt_hook_registry *reg, int from)
{
    while (reg->n_regs > from) {
        hook_reg *r = &reg->regs[--reg->n_regs];
        obj_release(reg, r->obj);
    }
}

/* ---- loading specs ------------------------------------------------------------------- */

static void spec_what(char *buf, size_t cap, const srt_hook_spec *s, const char *origin)
{
    snprintf(buf, cap, "hook spec '%s' (%s in %s)", s->name, s->where, origin);
}

static int load_specs(srt_hook_registry *reg, const srt_hook_spec_list *l, const char *origin,
                      const char *spec_dir, srt_err *err)
{
    srt_hook_resolved *res;
    const char *search = reg->has_search_path ? reg->search_path : NULL;
    int mark = reg->n_regs, rc = SRT_ERROR;
    char what[512];

    res = calloc((size_t)(l->n ? l->n : 1), sizeof *res);
    if (res == NULL)
        return srt_err_set(err, "out of memory");

    /* Resolve every factory first, so a bad path fails before any factory runs. */
    for (int i = 0; i < l->n; i++) {
        const srt_hook_spec *s = &l->specs[i];
        if ((s->n_patterns == 0 && !s->global) || s->factory == NULL)
            continue;
        spec_what(what, sizeof what, s, origin);
        if (srt_hook_resolve_factory(s->factory, spec_dir, search, what, &res[i], err) != SRT_OK)
            goto out;
    }

    for (int i = 0; i < l->n; i++) {
        const srt_hook_spec *s = &l->specs[i];
        const char *kind = s->pre ? "forward pre-hook" : "forward hook";
        hook_obj *o;
        srt_hook *h;
        int matched = 0;

        if (s->n_patterns == 0 && !s->global) {
            srt_log(SRT_LOG_WARN, "Hook spec '%s' has no 'target_modules', skipping", s->name);
            continue;
        }
        if (s->factory == NULL) {
            srt_log(SRT_LOG_WARN, "Hook spec '%s' has no 'hook_factory', skipping", s->name);
            continue;
        }
        spec_what(what, sizeof what, s, origin);
        o = obj_new(reg, s->name, s->factory, origin, s->config_json, err);
        if (o == NULL)
            goto out;
        o->per_request = s->per_request;
        o->lib = res[i].lib;        /* the object now owns the library reference */
        res[i].lib = NULL;
        h = res[i].factory(o->config_json, &o->host.host);
        if (h == NULL) {
            srt_log(SRT_LOG_WARN, "Hook factory '%s' for spec '%s' returned NULL, not "
                    "registering any hook", s->factory, s->name);
            obj_free(reg, o);
            continue;
        }
        o->hook = h;
        if (check_hook_object(h, s->pre, s->per_request, what, s->factory, err) != SRT_OK) {
            obj_free(reg, o);       /* the engine owns h now: destroy it */
            goto out;
        }

        o->refs++;                  /* held while registering, so a failure frees it once */
        if (s->global) {
            if (reg_add(reg, o, -1, s->pre, 1, s->prepend, s->always_call, s->with_kwargs,
                        err) == NULL) {
                obj_release(reg, o);
                goto out;
            }
            matched = 1;
            srt_log(SRT_LOG_INFO, "Registered global %s '%s' on all %d modules",
                    kind, s->name, reg->n);
        } else {
            for (int m = 0; m < reg->n; m++) {
                int hit = 0;
                for (int p = 0; p < s->n_patterns && !hit; p++)
                    hit = srt_hook_fnmatch(s->patterns[p], reg->names[m]);
                if (!hit)
                    continue;
                if (reg_add(reg, o, m, s->pre, 0, s->prepend, s->always_call, s->with_kwargs,
                            err) == NULL) {
                    obj_release(reg, o);
                    goto out;
                }
                matched++;
                srt_log(SRT_LOG_INFO, "Registered %s '%s' on %s", kind, s->name, reg->names[m]);
            }
        }
        if (!matched) {
            char *pats = srt_hook_pylist_repr(s->patterns, s->n_patterns);
            srt_log(SRT_LOG_WARN, "No modules matched hook spec '%s' patterns=%s",
                    s->name, pats ? pats : "[...]");
            free(pats);
        }
        obj_release(reg, o);        /* frees (and destroys) it when nothing matched */
    }
    if (rebuild(reg, err) != SRT_OK)
        goto out;
    rc = SRT_OK;

out:
    if (rc != SRT_OK && reg->n_regs > mark) {
        srt_log(SRT_LOG_ERROR, "%s: loading failed; removing the %d hook registration(s) it "
                "had made", origin, reg->n_regs - mark);
        truncate_regs(reg, mark);
    }
    for (int i = 0; i < l->n; i++)
        if (res[i].lib)
            dlclose(res[i].lib);
    free(res);
    return rc;
}

int srt_hook_registry_load_json(srt_hook_registry *reg, const char *json, size_t len,
                                const char *origin, srt_err *err)
{
    srt_hook_spec_list l;
    int rc;

    if (origin == NULL)
        origin = "forward hooks";
    if (srt_hook_spec_parse(json, len, origin, &l, err) != SRT_OK)
        return SRT_ERROR;
    rc = load_specs(reg, &l, origin, NULL, err);
    srt_hook_spec_list_free(&l);
    return rc;
}

static char *read_file(const char *path, size_t *len, srt_err *err)
{
    char *text;
    srt_err e;

    if (srt_read_file(path, SPEC_FILE_MAX, &text, len, &e) != SRT_OK) {
        srt_err_set(err, "hook spec file %s", e.msg);
        return NULL;
    }
    return text;
}

/* The spec file's directory, the first place relative factory libraries are looked for. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *d;

    if (slash == NULL)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    d = malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

/* The spec file at path, read and parsed into l (freed by the caller on SRT_OK). */
static int parse_file(const char *path, srt_hook_spec_list *l, srt_err *err)
{
    size_t len;
    char *text = read_file(path, &len, err);
    int rc;

    if (text == NULL)
        return SRT_ERROR;
    rc = srt_hook_spec_parse(text, len, path, l, err);
    free(text);
    return rc == SRT_OK ? SRT_OK : SRT_ERROR;
}

int srt_hook_registry_load_file(srt_hook_registry *reg, const char *path, srt_err *err)
{
    srt_hook_spec_list l;
    char *dir;
    int rc;

    if (parse_file(path, &l, err) != SRT_OK)
        return SRT_ERROR;
    dir = dir_of(path);
    if (dir == NULL) {
        srt_hook_spec_list_free(&l);
        return srt_err_set(err, "out of memory");
    }
    rc = load_specs(reg, &l, path, dir, err);
    free(dir);
    srt_hook_spec_list_free(&l);
    return rc;
}

int srt_hook_spec_check_file(const char *path, const char *search_path, srt_err *err)
{
    srt_hook_spec_list l;
    srt_hook_resolved res;
    char *dir, what[512];
    int rc = SRT_OK;

    if (parse_file(path, &l, err) != SRT_OK)
        return SRT_ERROR;
    dir = dir_of(path);
    for (int i = 0; i < l.n && rc == SRT_OK; i++) {
        const srt_hook_spec *s = &l.specs[i];
        if ((s->n_patterns == 0 && !s->global) || s->factory == NULL)
            continue;
        spec_what(what, sizeof what, s, path);
        rc = srt_hook_inspect_factory(s->factory, dir, search_path, what, &res, err);
        if (rc == SRT_OK)
            srt_hook_resolved_close(&res);
    }
    free(dir);
    srt_hook_spec_list_free(&l);
    return rc;
}

int srt_hook_spec_file_has_per_request(const char *path, const char *name, srt_err *err)
{
    srt_hook_spec_list l;
    int found = 0;

    if (parse_file(path, &l, err) != SRT_OK)
        return SRT_ERROR;
    for (int i = 0; i < l.n && !found; i++)
        found = l.specs[i].per_request && strcmp(l.specs[i].name, name) == 0;
    srt_hook_spec_list_free(&l);
    return found;
}

/* ---- direct attachment, handles, listing ---------------------------------------------- */

int64_t srt_hook_attach(srt_hook_registry *reg, const char *module_name, srt_hook *hook,
                        const srt_hook_attach_opts *opts, srt_err *err)
{
    srt_hook_attach_opts none = { 0 };
    const char *name;
    hook_obj *o;
    hook_reg *r;
    int m = -1;
    char what[384];

    if (opts == NULL)
        opts = &none;
    name = opts->name ? opts->name : "";
    if (hook == NULL) {
        srt_err_set(err, "hook '%s': no hook object", name);
        return -1;
    }
    if (!opts->global) {
        for (int i = 0; module_name && i < reg->n && m < 0; i++)
            if (strcmp(reg->names[i], module_name) == 0)
                m = i;
        if (m < 0) {
            srt_err_set(err, "hook '%s': no module named '%s'", name,
                        module_name ? module_name : "(null)");
            goto fail;
        }
    }
    if (opts->pre && opts->always_call) {
        srt_err_set(err, "hook '%s': 'always_call' applies to forward hooks only", name);
        goto fail;
    }
    snprintf(what, sizeof what, "hook '%s'", name);
    if (check_hook_object(hook, opts->pre, opts->per_request, what, "(attached)", err) != SRT_OK)
        goto fail;
    o = obj_new(reg, name, "(attached)", "(attached)", "{}", err);
    if (o == NULL)
        goto fail;
    o->hook = hook;
    o->per_request = opts->per_request;
    r = reg_add(reg, o, m, opts->pre, opts->global ? 1 : 0, opts->prepend, opts->always_call,
                opts->with_kwargs, err);
    if (r == NULL) {
        obj_free(reg, o);
        return -1;
    }
    if (rebuild(reg, err) != SRT_OK) {
        truncate_regs(reg, reg->n_regs - 1);
        return -1;
    }
    return r->id;

fail:
    if (hook && hook->destroy)
        hook->destroy(hook);
    return -1;
}

static hook_reg *find(srt_hook_registry *reg, int64_t id)
{
    for (int i = 0; i < reg->n_regs; i++)
        if (reg->regs[i].id == id)
            return &reg->regs[i];
    return NULL;
}

static int set_active(srt_hook_registry *reg, int64_t id, int active, srt_err *err)
{
    hook_reg *r = find(reg, id);

    if (r == NULL)
        return srt_err_set(err, "no hook with id %lld", (long long)id);
    if (r->active == active)
        return srt_err_set(err, "hook %lld ('%s') is already %s", (long long)id,
                           r->obj->spec_name, active ? "active" : "removed");
    r->active = (uint8_t)active;
    if (rebuild(reg, err) != SRT_OK) {
        r->active = (uint8_t)!active;
        return SRT_ERROR;
    }
    srt_log(SRT_LOG_INFO, "%s %s '%s' (id %lld) %s %s", active ? "Re-added" : "Removed",
            r->pre ? "forward pre-hook" : "forward hook", r->obj->spec_name, (long long)id,
            active ? "on" : "from", r->global ? "all modules" : reg->names[r->module]);
    return SRT_OK;
}

int srt_hook_remove(srt_hook_registry *reg, int64_t id, srt_err *err)
{
    return set_active(reg, id, 0, err);
}

int srt_hook_readd(srt_hook_registry *reg, int64_t id, srt_err *err)
{
    return set_active(reg, id, 1, err);
}

int srt_hook_delete(srt_hook_registry *reg, int64_t id, srt_err *err)
{
    hook_reg *r = find(reg, id);
    hook_obj *o;
    int idx;

    if (r == NULL)
        return srt_err_set(err, "no hook with id %lld", (long long)id);
    o = r->obj;
    idx = (int)(r - reg->regs);
    memmove(&reg->regs[idx], &reg->regs[idx + 1],
            (size_t)(reg->n_regs - idx - 1) * sizeof *reg->regs);
    reg->n_regs--;
    /* Detach before destroying: no module may point at a hook being destroyed. */
    if (rebuild(reg, err) != SRT_OK) {
        memmove(&reg->regs[idx + 1], &reg->regs[idx],
                (size_t)(reg->n_regs - idx) * sizeof *reg->regs);
        reg->n_regs++;
        return SRT_ERROR;
    }
    obj_release(reg, o);
    return SRT_OK;
}

static int set_active_spec(srt_hook_registry *reg, const char *spec, int active, srt_err *err)
{
    int changed = 0, found = 0;

    for (int i = 0; i < reg->n_regs; i++) {
        hook_reg *r = &reg->regs[i];
        if (strcmp(r->obj->spec_name, spec) != 0)
            continue;
        found++;
        if (r->active != active) {
            r->active = (uint8_t)active;
            changed++;
        }
    }
    if (!found)
        return srt_err_set(err, "no hook spec named '%s'", spec);
    if (changed && rebuild(reg, err) != SRT_OK)
        return SRT_ERROR;
    srt_log(SRT_LOG_INFO, "%s %d registration(s) of hook spec '%s'",
            active ? "Re-added" : "Removed", changed, spec);
    return changed;
}

int srt_hook_remove_spec(srt_hook_registry *reg, const char *spec_name, srt_err *err)
{
    return set_active_spec(reg, spec_name, 0, err);
}

int srt_hook_readd_spec(srt_hook_registry *reg, const char *spec_name, srt_err *err)
{
    return set_active_spec(reg, spec_name, 1, err);
}

static void gen_str(yajl_gen g, const char *s)
{
    yajl_gen_string(g, (const unsigned char *)s, strlen(s));
}

static void gen_kv_str(yajl_gen g, const char *k, const char *v)
{
    gen_str(g, k);
    gen_str(g, v);
}

static void gen_kv_bool(yajl_gen g, const char *k, int v)
{
    gen_str(g, k);
    yajl_gen_bool(g, v);
}

static void gen_kv_int(yajl_gen g, const char *k, long long v)
{
    gen_str(g, k);
    yajl_gen_integer(g, v);
}

int srt_hook_registry_list_json(srt_hook_registry *reg, char **out, size_t *len, srt_err *err)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    hook_reg **sorted;
    const unsigned char *buf;
    size_t blen;
    int rc = SRT_ERROR;

    *out = NULL;
    if (g == NULL)
        return srt_err_set(err, "out of memory");
    sorted = malloc((size_t)(reg->n_regs ? reg->n_regs : 1) * sizeof *sorted);
    if (sorted == NULL) {
        yajl_gen_free(g);
        return srt_err_set(err, "out of memory");
    }
    /* Listed in id order: the order they were registered in. */
    for (int i = 0; i < reg->n_regs; i++)
        sorted[i] = &reg->regs[i];

    yajl_gen_map_open(g);
    gen_kv_int(g, "generation", (long long)reg->generation);
    gen_kv_int(g, "active", reg->n_active);
    gen_kv_int(g, "modules", reg->n);
    gen_str(g, "hooks");
    yajl_gen_array_open(g);
    for (int i = 0; i < reg->n_regs; i++) {
        const hook_reg *r = sorted[i];
        yajl_gen_map_open(g);
        gen_kv_int(g, "id", (long long)r->id);
        gen_kv_str(g, "name", r->obj->spec_name);
        gen_kv_str(g, "type", r->pre ? "forward_pre" : "forward");
        gen_kv_str(g, "module", r->global ? "*" : reg->names[r->module]);
        gen_kv_bool(g, "global", r->global);
        gen_kv_bool(g, "active", r->active);
        gen_kv_bool(g, "prepend", r->prepend);
        gen_kv_bool(g, "always_call", r->always_call);
        gen_kv_bool(g, "with_kwargs", r->with_kwargs);
        gen_kv_bool(g, "per_request", r->obj->per_request);
        gen_kv_str(g, "factory", r->obj->factory);
        gen_kv_str(g, "source", r->obj->source);
        yajl_gen_map_close(g);
    }
    yajl_gen_array_close(g);
    yajl_gen_map_close(g);
    if (yajl_gen_get_buf(g, &buf, &blen) == yajl_gen_status_ok &&
        (*out = malloc(blen + 1)) != NULL) {
        memcpy(*out, buf, blen);
        (*out)[blen] = '\0';
        if (len)
            *len = blen;
        rc = SRT_OK;
    } else {
        srt_err_set(err, "hook listing: JSON generation failed");
    }
    free(sorted);
    yajl_gen_free(g);
    return rc;
}

int srt_hook_registry_active(const srt_hook_registry *reg)
{
    return reg ? reg->n_active : 0;
}

uint64_t srt_hook_registry_generation(const srt_hook_registry *reg)
{
    return reg ? reg->generation : 0;
}

void srt_hook_registry_free(srt_hook_registry *reg)
{
    if (reg == NULL)
        return;
    /* Detach from every module before any destroy runs. */
    for (int m = 0; m < reg->n; m++) {
        free(reg->mods[m]->hooks);
        reg->mods[m]->hooks = NULL;
    }
    truncate_regs(reg, 0);
    while (reg->objs)               /* only objects mid-load could remain; be safe */
        obj_free(reg, reg->objs);
    for (int m = 0; m < reg->n; m++)
        free(reg->names[m]);
    free(reg->names);
    free(reg->mods);
    free(reg->regs);
    free(reg->search_path);
    srt_hook_req_table_free(&reg->reqs);
    free(reg);
}

/* ---- per-request selections ------------------------------------------------------------ */

int srt_hook_request_begin(srt_hook_registry *reg, uint64_t request_id,
                           const srt_request_hooks *sel_in, srt_err *err)
{
    srt_request_hooks sel = *sel_in;    /* may be shared memory: one read, then clamp */
    srt_hook_req *e;

    srt_request_hooks_clamp(&sel);
    if (sel.n == 0)
        return SRT_OK;
    if (reg == NULL)
        return srt_err_set(err, "hook '%s' was selected, but this model has no forward hooks "
                           "(srt_forward_hooks)", sel.name[0]);
    e = calloc(1, sizeof *e);
    if (e == NULL)
        return srt_err_set(err, "out of memory");
    e->id = request_id;
    for (int i = 0; i < sel.n; i++) {
        const hook_obj *o;
        const char *cfg = sel.config_len[i] ? sel.config_text + sel.config_off[i] : "{}";

        for (o = reg->objs; o; o = o->next)
            if (o->per_request && o->hook && strcmp(o->spec_name, sel.name[i]) == 0)
                break;
        if (o == NULL) {
            srt_err_set(err, "hook '%s' is not a per-request hook spec of this model "
                        "(\"per_request\": true in srt_forward_hooks)", sel.name[i]);
            goto fail;
        }
        memcpy(e->spec[e->n], sel.name[i], sizeof e->spec[e->n]);
        e->config[e->n] = strdup(cfg);
        if (e->config[e->n] == NULL) {
            srt_err_set(err, "out of memory");
            goto fail;
        }
        if (srt_hook_host_init(&e->host[e->n], o->spec_name, o->source, e->config[e->n],
                               reg->tp_rank, reg->tp_size, &reg->dev, err) != SRT_OK) {
            free(e->config[e->n]);
            goto fail;
        }
        e->n++;
    }
    if (reg->reqs.n == reg->reqs.cap) {
        int cap = reg->reqs.cap ? reg->reqs.cap * 2 : 16;
        srt_hook_req **v = realloc(reg->reqs.v, (size_t)cap * sizeof *v);
        if (v == NULL) {
            srt_err_set(err, "out of memory");
            goto fail;
        }
        reg->reqs.v = v;
        reg->reqs.cap = cap;
    }
    srt_hook_request_end(reg, request_id);
    reg->reqs.v[reg->reqs.n++] = e;
    return SRT_OK;
fail:
    srt_hook_req_free(e);
    return SRT_ERROR;
}

void srt_hook_request_end(srt_hook_registry *reg, uint64_t request_id)
{
    if (reg == NULL)
        return;
    for (int k = 0; k < reg->reqs.n; k++) {
        if (reg->reqs.v[k]->id != request_id)
            continue;
        srt_hook_req_free(reg->reqs.v[k]);
        reg->reqs.v[k] = reg->reqs.v[--reg->reqs.n];
        return;
    }
}

int srt_hook_request_selected(const srt_hook_registry *reg, uint64_t request_id)
{
    return reg != NULL && srt_hook_req_find(&reg->reqs, request_id) != NULL;
}

/* ---- a backend's memory for hooks ---------------------------------------------------- */

static int backend_d2h(void *dst, const void *src, size_t n, void *ctx)
{
    srt_backend *be = ctx;
    srt_err e;
    return be->ops->download(be, dst, src, n, &e);
}

static int backend_h2d(void *dst, const void *src, size_t n, void *ctx)
{
    srt_backend *be = ctx;
    srt_err e;
    return be->ops->upload(be, dst, src, n, &e);
}

static int backend_d2d(void *dst, const void *src, size_t n, void *ctx)
{
    srt_backend *be = ctx;
    be->ops->copy(be, dst, src, n);
    return SRT_OK;
}

void srt_hook_registry_use_backend(srt_hook_registry *reg, srt_backend *be)
{
    srt_hook_device_ops ops = { backend_d2h, backend_h2d, backend_d2d, be,
                                be->ops->stream ? be->ops->stream(be) : NULL };
    srt_hook_registry_set_device_ops(reg, &ops);
}
