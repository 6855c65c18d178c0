/* Status codes, error messages and logging shared by every engine part.
 * Library code never exits or aborts: it runs inside nginx processes. */
#ifndef SRT_COMMON_H
#define SRT_COMMON_H

#include <stddef.h>
#include <stdint.h>

/* Marks the engine's public API. libsrt is compiled with -fvisibility=hidden, so everything
 * else (the template interpreter, tokenizer internals, the channel, the scheduler's helpers)
 * stays inside whatever links it: nginx loads modules RTLD_GLOBAL, and a module exporting
 * its internals would lend them to every other module. scripts/check-boundaries.sh checks
 * the module's dynamic symbols against the SRT_API declarations. */
#define SRT_API __attribute__((visibility("default")))

#define SRT_OK     0
#define SRT_ERROR -1

/* An error message filled by the failing call; callers own the storage. */
typedef struct srt_err {
    char msg[1024];
} srt_err;

SRT_API int srt_err_set(srt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "PATH: cannot open: REASON" for an open() that failed with errnum; a permission error
 * also names the user the process runs as (nginx's scheduler is not root: the usual
 * cause is a model that its user cannot read). */
int srt_err_open(srt_err *err, const char *path, int errnum);   /* libsrt only */

typedef enum srt_log_level {
    SRT_LOG_ERROR = 0,
    SRT_LOG_WARN  = 1,
    SRT_LOG_INFO  = 2,
    SRT_LOG_DEBUG = 3,
} srt_log_level;

/* Logging goes to stderr until a host (nginx, a test) installs its own sink. */
typedef void (*srt_log_sink)(srt_log_level level, const char *msg, void *user);
SRT_API void srt_log_set_sink(srt_log_sink sink, void *user, srt_log_level max_level);
/* libsrt only: a hook logs through its srt_hook_host (srt_hooks.h) */
void srt_log(srt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A whole file, NUL-terminated (*out_len excludes the NUL; may be NULL): for configuration-
 * sized files (JSON, templates, hook specs). Refuses files over max bytes. Errors name the
 * path (srt_err_open's wording when it cannot be opened); the caller frees *out. */
SRT_API int srt_read_file(const char *path, size_t max, char **out, size_t *out_len, srt_err *err);

/* JSON from requests and model files is refused above this nesting depth before any tree is
 * built: tree code recurses once per level (yajl_tree_free, re-serialisation, walks), and
 * yajl_gen itself stops at 128. No legitimate request, tokenizer.json, config or hook spec
 * comes near it. */
#define SRT_JSON_MAX_DEPTH 64

/* Deepest nesting of [ and { outside strings in s[0..len). */
size_t srt_json_depth(const char *s, size_t len);

#endif
