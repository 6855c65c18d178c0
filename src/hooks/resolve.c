/* hook_factory strings -> a loaded library and a factory symbol.
 *
 * Forms (the rule is documented in src/hooks/README.md):
 *   "/abs/libx.so:sym"      that file
 *   "dir/libx.so:sym"       relative to a directory of srt_hooks_path / SRT_HOOKS_PATH
 *   "libx.so:sym"           searched: srt_hooks_path / SRT_HOOKS_PATH, then the dynamic
 *                           loader's own search (LD_LIBRARY_PATH, ld.so.cache)
 * Never the spec file's directory (whoever may write there would choose the code the
 * scheduler runs), and never a relative name with a ".." component.
 *   "pkg.mod:sym"           module "pkg.mod" -> file "pkg/mod.so", searched as above
 *   "pkg.mod.sym"           the same as "pkg.mod:sym" (last component is the symbol)
 * A "library" part is a file name when it ends in ".so" or contains ".so." or a '/';
 * otherwise it is a dotted module path. */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hooks/hooks_internal.h"

#if defined(__x86_64__)
#define SRT_MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define SRT_MULTIARCH "aarch64-linux-gnu"
#else
#define SRT_MULTIARCH ""
#endif

static int is_library_name(const char *s, size_t len)
{
    if (memchr(s, '/', len))
        return 1;
    if (len >= 3 && memcmp(s + len - 3, ".so", 3) == 0)
        return 1;
    for (size_t i = 0; i + 4 <= len; i++)
        if (memcmp(s + i, ".so.", 4) == 0)
            return 1;
    return 0;
}

static int valid_identifier(const char *s, size_t len)
{
    if (len == 0)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (i > 0 && c >= '0' && c <= '9')))
            return 0;
    }
    return 1;
}

/* "pkg.mod" -> "pkg/mod.so"; every component must be an identifier. */
static int module_to_file(const char *mod, size_t len, char *out, size_t cap)
{
    size_t o = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i == len || mod[i] == '.') {
            if (!valid_identifier(mod + start, i - start))
                return -1;
            start = i + 1;
        }
    }
    if (len + 4 > cap)
        return -1;
    for (size_t i = 0; i < len; i++)
        out[o++] = mod[i] == '.' ? '/' : mod[i];
    memcpy(out + o, ".so", 4);
    return 0;
}

static int try_open(const char *path, srt_hook_resolved *out, const char *what,
                    const char *factory, int inspect, srt_err *err)
{
    void *h;

    if (inspect) {
        char why[1024];
        if (srt_elf_open(path, &out->elf, why, sizeof why) != SRT_OK) {
            srt_elf_close(out->elf);
            out->elf = NULL;
            return srt_err_set(err, "%s: hook_factory '%s': cannot load library '%s': %s",
                               what, factory, path, why);
        }
        snprintf(out->path, sizeof out->path, "%s", path);
        return SRT_OK;
    }
    dlerror();
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        return srt_err_set(err, "%s: hook_factory '%s': cannot load library '%s': %s",
                           what, factory, path, e ? e : "unknown dlopen error");
    }
    out->lib = h;
    snprintf(out->path, sizeof out->path, "%s", path);
    return SRT_OK;
}

static int join(char *buf, size_t cap, const char *dir, size_t dlen, const char *file)
{
    int n = snprintf(buf, cap, "%.*s%s%s", (int)dlen, dir,
                     dlen && dir[dlen - 1] != '/' ? "/" : "", file);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* Where the dynamic loader would find a bare file name: LD_LIBRARY_PATH, the directories of
 * /etc/ld.so.conf.d, then the default ones. 0 with the path in buf, -1 when none has it. */
static int loader_find(const char *file, char *buf, size_t cap)
{
    static const char *dflt[] = { "/lib/" SRT_MULTIARCH, "/usr/lib/" SRT_MULTIARCH, "/lib", "/usr/lib",
                                  "/lib64", "/usr/lib64", "/usr/local/lib" };
    const char *env = getenv("LD_LIBRARY_PATH");
    char line[1024];

    for (const char *p = env; p && *p; ) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        if (dlen > 0 && join(buf, cap, p, dlen, file) == 0 && access(buf, F_OK) == 0)
            return 0;
        p = end ? end + 1 : p + dlen;
    }
    glob_t g;
    int found = 0;
    if (glob("/etc/ld.so.conf.d/*.conf", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !found; i++) {
            FILE *f = fopen(g.gl_pathv[i], "re");
            while (f && !found && fgets(line, sizeof line, f)) {
                size_t n = strcspn(line, "#\r\n");
                while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
                    n--;
                found = line[0] == '/' && join(buf, cap, line, n, file) == 0 && access(buf, F_OK) == 0;
            }
            if (f)
                fclose(f);
        }
        globfree(&g);
    }
    if (found)
        return 0;
    for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
        if (join(buf, cap, dflt[i], strlen(dflt[i]), file) == 0 && access(buf, F_OK) == 0)
            return 0;
    return -1;
}

static int open_library(const char *file, const char *spec_dir, const char *search_path,
                        srt_hook_resolved *out, const char *what, const char *factory,
                        int inspect, srt_err *err)
{
    char buf[4096], tried[1024];
    size_t tlen = 0;

    (void)spec_dir;
    tried[0] = '\0';
    if (file[0] == '/')
        return try_open(file, out, what, factory, inspect, err);

    for (const char *p = file; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == file || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
            return srt_err_set(err, "%s: hook_factory '%s': a library path may not contain "
                               "'..'", what, factory);

    if (search_path == NULL)
        search_path = getenv("SRT_HOOKS_PATH");
    for (const char *p = search_path; p && *p; ) {
        const char *end = strchr(p, ':');
        size_t dlen = end ? (size_t)(end - p) : strlen(p);
        if (dlen > 0 && join(buf, sizeof buf, p, dlen, file) == 0) {
            if (access(buf, F_OK) == 0)
                return try_open(buf, out, what, factory, inspect, err);
            if (tlen < sizeof tried)
                tlen += (size_t)snprintf(tried + tlen, sizeof tried - tlen, "%s%.*s",
                                         tlen ? ", " : "", (int)dlen, p);
        }
        p = end ? end + 1 : p + dlen;
    }
    /* A bare file name may still be found by the dynamic loader itself. */
    if (strchr(file, '/') == NULL && !inspect)
        return try_open(file, out, what, factory, 0, err);
    if (strchr(file, '/') == NULL) {
        if (loader_find(file, buf, sizeof buf) == 0)
            return try_open(buf, out, what, factory, 1, err);
        return srt_err_set(err, "%s: hook_factory '%s': cannot load library '%s': %s: cannot open "
                           "shared object file: No such file or directory", what, factory, file, file);
    }
    return srt_err_set(err, "%s: hook_factory '%s': cannot load library '%s': not found in "
                       "[%s] (srt_hooks_path / SRT_HOOKS_PATH; never the spec file's directory)",
                       what, factory, file, tried);
}

static int resolve(const char *factory, const char *spec_dir, const char *search_path,
                   const char *what, int inspect, srt_hook_resolved *out, srt_err *err)
{
    const char *colon = strchr(factory, ':');
    const char *lib, *sym;
    size_t lib_len, sym_len;
    char file[2048];
    static const uint32_t zero = 0;
    const void *abi;
    void *fn;

    memset(out, 0, sizeof *out);
    if (colon) {
        lib = factory;
        lib_len = (size_t)(colon - factory);
        sym = colon + 1;
        sym_len = strlen(sym);
    } else {
        const char *dot = strrchr(factory, '.');
        if (dot == NULL)
            return srt_err_set(err, "%s: invalid hook_factory '%s'. Expected "
                               "'libx.so:factory', 'module.submodule:factory' or "
                               "'module.submodule.factory'", what, factory);
        lib = factory;
        lib_len = (size_t)(dot - factory);
        sym = dot + 1;
        sym_len = strlen(sym);
    }
    if (lib_len == 0 || !valid_identifier(sym, sym_len) || sym_len >= sizeof out->symbol)
        return srt_err_set(err, "%s: invalid hook_factory '%s': needs a library or module "
                           "and a C symbol name ('libx.so:factory', 'module.submodule:factory' "
                           "or 'module.submodule.factory')", what, factory);
    if (colon && is_library_name(lib, lib_len)) {
        if (lib_len >= sizeof file)
            return srt_err_set(err, "%s: hook_factory '%s': path too long", what, factory);
        memcpy(file, lib, lib_len);
        file[lib_len] = '\0';
    } else if (module_to_file(lib, lib_len, file, sizeof file) != 0) {
        return srt_err_set(err, "%s: invalid hook_factory '%s': '%.*s' is neither a library "
                           "file (ending in .so) nor a dotted module path of identifiers",
                           what, factory, (int)lib_len, lib);
    }
    memcpy(out->symbol, sym, sym_len);
    out->symbol[sym_len] = '\0';

    if (open_library(file, spec_dir, search_path, out, what, factory, inspect, err) != SRT_OK)
        return SRT_ERROR;

    if (inspect) {
        size_t size = 0;
        abi = NULL;
        if (srt_elf_symbol(out->elf, SRT_HOOK_ABI_SYMBOL, &abi, &size) && abi == NULL)
            abi = &zero;   /* zero-filled (.bss): ABI 0.0 */
        else if (abi && size < sizeof(uint32_t))
            abi = &zero;
    } else {
        dlerror();
        abi = dlsym(out->lib, SRT_HOOK_ABI_SYMBOL);
    }
    if (abi == NULL) {
        srt_err_set(err, "%s: library '%s' does not export '%s': it was not built with "
                    "SRT_HOOK_LIBRARY() from srt_hooks.h, refusing it", what, out->path,
                    SRT_HOOK_ABI_SYMBOL);
        goto fail;
    }
    if (!srt_hook_abi_compatible(*(const uint32_t *)abi)) {
        uint32_t v = *(const uint32_t *)abi;
        srt_err_set(err, "%s: library '%s' was built for hook ABI %u.%u; this server runs "
                    "hook ABI %d.%d, refusing it", what, out->path, v >> 16, v & 0xffffu,
                    SRT_HOOK_ABI_VERSION_MAJOR, SRT_HOOK_ABI_VERSION_MINOR);
        goto fail;
    }
    if (inspect) {
        const void *data;
        size_t size;
        if (!srt_elf_symbol(out->elf, out->symbol, &data, &size)) {
            srt_err_set(err, "%s: library '%s' has no symbol '%s' (from hook path '%s'): %s: "
                        "undefined symbol: %s", what, out->path, out->symbol, factory, out->path,
                        out->symbol);
            goto fail;
        }
        return SRT_OK;
    }
    dlerror();
    fn = dlsym(out->lib, out->symbol);
    if (fn == NULL) {
        const char *e = dlerror();
        srt_err_set(err, "%s: library '%s' has no symbol '%s' (from hook path '%s'): %s",
                    what, out->path, out->symbol, factory, e ? e : "symbol is NULL");
        goto fail;
    }
    /* POSIX guarantees function pointers round-trip through dlsym's void *. */
    memcpy(&out->factory, &fn, sizeof fn);
    return SRT_OK;

fail:
    srt_hook_resolved_close(out);
    return SRT_ERROR;
}

int srt_hook_resolve_factory(const char *factory, const char *spec_dir, const char *search_path,
                             const char *what, srt_hook_resolved *out, srt_err *err)
{
    return resolve(factory, spec_dir, search_path, what, 0, out, err);
}

int srt_hook_inspect_factory(const char *factory, const char *spec_dir, const char *search_path,
                             const char *what, srt_hook_resolved *out, srt_err *err)
{
    return resolve(factory, spec_dir, search_path, what, 1, out, err);
}

void srt_hook_resolved_close(srt_hook_resolved *r)
{
    if (r->lib)
        dlclose(r->lib);
    r->lib = NULL;
    srt_elf_close(r->elf);
    r->elf = NULL;
}
