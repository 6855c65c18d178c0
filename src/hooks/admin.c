/* srt_admin commands applied to the hook registry. See admin.h. */
#include "hooks/admin.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* {"error":{"message":..,"type":..,"param":null,"code":status}} with the message escaped. */
static int admin_error(int status, char **body, size_t *len, const char *fmt, ...)
{
    char msg[512], esc[1100];
    size_t j = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (size_t i = 0; msg[i] && j + 7 < sizeof esc; i++) {
        unsigned char ch = (unsigned char)msg[i];
        if (ch == '"' || ch == '\\') {
            esc[j++] = '\\';
            esc[j++] = (char)ch;
        } else if (ch < 0x20) {
            j += (size_t)snprintf(esc + j, sizeof esc - j, "\\u%04x", ch);
        } else {
            esc[j++] = (char)ch;
        }
    }
    esc[j] = 0;
    size_t cap = j + 160;
    *body = malloc(cap);
    if (!*body) {
        *len = 0;
        return 500;
    }
    int n = snprintf(*body, cap,
                     "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":%d}}",
                     esc, status >= 500 ? "server_error" : "invalid_request_error", status);
    *len = n > 0 ? (size_t)n : 0;
    return status;
}

/* {"action":"remove","changed":N,"generation":..,"active":..,"hooks":[...]} */
static int admin_listing(srt_hook_registry *reg, const char *action, int changed, char **body,
                         size_t *len)
{
    char *list = NULL;
    size_t n = 0;
    srt_err err;

    if (!reg) {
        list = strdup("{\"generation\":0,\"active\":0,\"hooks\":[]}");
        n = list ? strlen(list) : 0;
    } else if (srt_hook_registry_list_json(reg, &list, &n, &err) != SRT_OK) {
        return admin_error(500, body, len, "listing hooks: %s", err.msg);
    }
    if (!list)
        return admin_error(500, body, len, "out of memory");
    if (!action) {
        *body = list;
        *len = n;
        return 200;
    }
    /* splice the action in front of the listing's own keys */
    size_t cap = n + 96;
    *body = malloc(cap);
    if (!*body) {
        free(list);
        return admin_error(500, body, len, "out of memory");
    }
    int k = snprintf(*body, cap, "{\"action\":\"%s\",\"changed\":%d%s%s", action, changed,
                     n > 2 ? "," : "", list + 1);
    free(list);
    *len = k > 0 ? (size_t)k : 0;
    return 200;
}

int srt_hook_admin_apply(srt_hook_registry *reg, const char *cmd, char **body, size_t *len)
{
    char action[16], by[8], arg[SRT_CHAN_ADMIN_REQ_MAX];
    int changed = 1, rc;
    srt_err err;

    *body = NULL;
    *len = 0;
    if (strcmp(cmd, "list") == 0)
        return admin_listing(reg, NULL, 0, body, len);
    if (sscanf(cmd, "%15s %7s %1023[^\n]", action, by, arg) != 3)
        return admin_error(400, body, len, "bad admin command");
    int is_id = strcmp(by, "id") == 0, is_name = strcmp(by, "name") == 0;
    if (!is_id && !is_name)
        return admin_error(400, body, len, "a hook is named by \"id\" or \"name\"");
    if (strcmp(action, "remove") && strcmp(action, "readd") && strcmp(action, "delete"))
        return admin_error(400, body, len,
                           "unknown action \"%s\" (list, remove, readd, delete)", action);

    long long id = 0;
    if (is_id) {
        char *end;
        errno = 0;
        id = strtoll(arg, &end, 10);
        if (errno || *end || end == arg || id <= 0)
            return admin_error(400, body, len, "hook id \"%s\" is not a positive integer", arg);
    }
    if (!reg)
        return admin_error(404, body, len, "no hooks are registered (no srt_forward_hooks)");

    if (strcmp(action, "remove") == 0) {
        if (is_id)
            rc = srt_hook_remove(reg, id, &err);
        else
            rc = changed = srt_hook_remove_spec(reg, arg, &err);
    } else if (strcmp(action, "readd") == 0) {
        if (is_id)
            rc = srt_hook_readd(reg, id, &err);
        else
            rc = changed = srt_hook_readd_spec(reg, arg, &err);
    } else {
        if (!is_id)
            return admin_error(400, body, len, "delete takes a hook id");
        rc = srt_hook_delete(reg, id, &err);
    }
    if (rc < 0) {
        /* an unknown id or spec is 404; a hook already in the asked state is 409 */
        if (strstr(err.msg, "already"))
            return admin_error(409, body, len, "%s", err.msg);
        return admin_error(404, body, len, "%s", err.msg);
    }
    return admin_listing(reg, action, changed, body, len);
}

void srt_hook_admin_answer(srt_chan *c, srt_hook_registry *reg, const char *cmd)
{
    char *body = NULL;
    size_t len = 0;
    int status = srt_hook_admin_apply(reg, cmd, &body, &len);

    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                  "\"param\":null,\"code\":500}}";
        srt_chan_sched_admin_reply(c, 500, oom, sizeof oom - 1);
        return;
    }
    if (len > SRT_CHAN_ADMIN_RESP_MAX) {
        free(body);
        status = admin_error(500, &body, &len, "the hook listing is larger than %d bytes",
                             SRT_CHAN_ADMIN_RESP_MAX);
    }
    srt_chan_sched_admin_reply(c, status, body ? body : "", body ? len : 0);
    free(body);
}

int srt_chan_sched_admin_serve(srt_chan *c, srt_hook_registry *reg)
{
    char cmd[SRT_CHAN_ADMIN_REQ_MAX];

    if (srt_chan_sched_admin_take(c, cmd, sizeof cmd) == 0)
        return 0;
    srt_hook_admin_answer(c, reg, cmd);
    return 1;
}
