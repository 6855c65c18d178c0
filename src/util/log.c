#include <errno.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "srt/common.h"

static srt_log_sink log_sink;
static void *log_user;
static srt_log_level log_max = SRT_LOG_INFO;

int srt_err_set(srt_err *err, const char *fmt, ...)
{
    va_list ap;
    if (err) {
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return SRT_ERROR;
}

int srt_err_open(srt_err *err, const char *path, int errnum)
{
    struct passwd *pw;
    uid_t uid;

    if (errnum != EACCES && errnum != EPERM)
        return srt_err_set(err, "%s: cannot open: %s", path, strerror(errnum));
    uid = geteuid();
    pw = getpwuid(uid);
    return srt_err_set(err, "%s: cannot open: %s (this process runs as user \"%s\", uid %u, "
                       "which needs read access to the file and search access to every "
                       "directory above it)", path, strerror(errnum), pw ? pw->pw_name : "?",
                       (unsigned) uid);
}

void srt_log_set_sink(srt_log_sink sink, void *user, srt_log_level max_level)
{
    log_sink = sink;
    log_user = user;
    log_max = max_level;
}

void srt_log(srt_log_level level, const char *fmt, ...)
{
    static const char *names[] = { "error", "warn", "info", "debug" };
    char buf[2048];
    va_list ap;

    if (level > log_max)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (log_sink)
        log_sink(level, buf, log_user);
    else
        fprintf(stderr, "[srt %s] %s\n", names[level], buf);
}
