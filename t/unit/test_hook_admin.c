/* srt_admin's engine half: the channel's admin mailbox (post, take, reply, result, cancel,
 * a dead worker's command taken over) and the hook registry commands the scheduler applies. */
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hooks/registry.h"
#include "ipc/channel.h"
#include "hooks/admin.h"
#include "srt_hooks.h"
#include "chan_dir.h"
#include "tap.h"

static int noop(srt_hook *h, const srt_hook_call *c, const srt_module_args *a,
                srt_tensor_view *o, srt_tensor_view *r)
{
    (void)h; (void)c; (void)a; (void)o; (void)r;
    return SRT_OK;
}

static srt_chan *chan;
static char body[SRT_CHAN_ADMIN_RESP_MAX + 1];

/* Post cmd, let the scheduler side serve it, read the answer: the HTTP status. */
static int roundtrip(srt_hook_registry *reg, const char *cmd)
{
    uint64_t t;
    int status = -1;
    size_t len = 0;
    if (srt_chan_admin_post(chan, cmd, strlen(cmd), &t) != SRT_OK)
        return -2;
    if (srt_chan_sched_admin_serve(chan, reg) != 1)
        return -3;
    if (srt_chan_admin_result(chan, t, &status, body, SRT_CHAN_ADMIN_RESP_MAX, &len) != 1)
        return -4;
    body[len] = 0;
    return status;
}

int main(void)
{
    srt_chan_config cfg;
    srt_err err;
    memset(&cfg, 0, sizeof cfg);
    cfg.slots = 2;
    cfg.slot_tokens = 16;
    chan_dir_set(&cfg);
    size_t size = srt_chan_size(&cfg);
    void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ok(mem != MAP_FAILED && srt_chan_format(mem, size, &cfg, &err) == SRT_OK, "channel formatted");
    chan = srt_chan_attach(mem, size, &err);
    ok(chan != NULL, "attached");

    static srt_module mods[3];
    const char *names[3] = { "", "model.layers.0", "model.layers.1" };
    for (int i = 0; i < 3; i++) {
        mods[i].info.name = names[i];
        mods[i].info.class_name = "Linear";
        mods[i].info.index = i;
        mods[i].parent = i ? 0 : -1;
    }
    srt_hook_registry *reg = srt_hook_registry_create(mods, 3, &err);
    ok(reg != NULL, "registry");
    srt_hook hook = { SRT_HOOK_ABI_VERSION, sizeof(srt_hook), NULL, noop, NULL, NULL, NULL, NULL };
    srt_hook hook2 = hook;
    srt_hook_attach_opts oa = { .name = "a" }, ob = { .name = "b" };
    ok(srt_hook_attach(reg, "model.layers.0", &hook, &oa, &err) == 1, "hook 1 attached");
    ok(srt_hook_attach(reg, "model.layers.1", &hook2, &ob, &err) == 2, "hook 2 attached");

    /* the mailbox itself */
    uint64_t t1, t2;
    char cmd[64];
    int status;
    size_t len;
    ok(srt_chan_sched_admin_take(chan, cmd, sizeof cmd) == 0, "nothing to take at first");
    ok(srt_chan_admin_post(chan, "list", 4, &t1) == SRT_OK, "post");
    ok(srt_chan_admin_post(chan, "list", 4, &t2) == 1, "a second command waits its turn");
    ok(srt_chan_admin_result(chan, t1, &status, body, sizeof body, &len) == 0, "not answered yet");
    ok(srt_chan_sched_admin_take(chan, cmd, sizeof cmd) == 4 && strcmp(cmd, "list") == 0,
       "the scheduler takes it");
    ok(srt_chan_sched_admin_take(chan, cmd, sizeof cmd) == 0, "taken once");
    srt_chan_sched_admin_reply(chan, 200, "{}", 2);
    ok(srt_chan_admin_result(chan, t1, &status, body, sizeof body, &len) == 1 && status == 200 &&
       len == 2 && memcmp(body, "{}", 2) == 0, "the answer comes back");
    ok(srt_chan_admin_result(chan, t1, &status, body, sizeof body, &len) == SRT_ERROR,
       "an answer is read once");

    /* cancel before and while the scheduler works on it */
    ok(srt_chan_admin_post(chan, "list", 4, &t1) == SRT_OK, "post again");
    srt_chan_admin_cancel(chan, t1);
    ok(srt_chan_sched_admin_take(chan, cmd, sizeof cmd) == 0, "a cancelled command is not taken");
    ok(srt_chan_admin_post(chan, "list", 4, &t1) == SRT_OK, "the mailbox is free after a cancel");
    ok(srt_chan_sched_admin_take(chan, cmd, sizeof cmd) == 4, "taken");
    srt_chan_admin_cancel(chan, t1);
    ok(srt_chan_admin_post(chan, "list", 4, &t2) == 1, "busy while the scheduler works on it");
    srt_chan_sched_admin_reply(chan, 200, "{}", 2);
    ok(srt_chan_admin_result(chan, t1, &status, body, sizeof body, &len) == SRT_ERROR,
       "a cancelled command has no answer");
    ok(srt_chan_admin_post(chan, "list", 4, &t2) == SRT_OK, "the reply freed the mailbox");
    srt_chan_admin_cancel(chan, t2);

    char big[SRT_CHAN_ADMIN_REQ_MAX + 8];
    memset(big, 'x', sizeof big);
    ok(srt_chan_admin_post(chan, big, sizeof big, &t1) == SRT_ERROR, "too long a command");

    /* a worker that dies with its command posted leaves the mailbox to the next one */
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t t;
        _exit(srt_chan_admin_post(chan, "list", 4, &t) == SRT_OK ? 0 : 1);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "a child posted and died");
    ok(srt_chan_admin_post(chan, "list", 4, &t1) == SRT_OK, "its mailbox is taken over");
    srt_chan_admin_cancel(chan, t1);

    /* registry commands */
    is_int(roundtrip(reg, "list"), 200, "list");
    ok(strstr(body, "\"active\":2") && strstr(body, "\"name\":\"a\"") && strstr(body, "\"name\":\"b\""),
       "the listing names both hooks: %s", body);
    is_int(roundtrip(reg, "remove id 1"), 200, "remove id 1");
    ok(strncmp(body, "{\"action\":\"remove\",\"changed\":1,", 31) == 0 && strstr(body, "\"active\":1,"),
       "remove answers the action and the listing: %s", body);
    ok(srt_hook_registry_active(reg) == 1, "the registry has one active hook");
    is_int(roundtrip(reg, "remove id 1"), 409, "removing it again");
    ok(strstr(body, "\"code\":409") && strstr(body, "already"), "409 body: %s", body);
    is_int(roundtrip(reg, "remove id 99"), 404, "unknown id");
    ok(strstr(body, "{\"error\":{\"message\":\"no hook with id 99\"") != NULL, "404 body: %s", body);
    is_int(roundtrip(reg, "readd name nobody"), 404, "unknown spec");
    is_int(roundtrip(reg, "explode id 1"), 400, "unknown action");
    is_int(roundtrip(reg, "remove by 1"), 400, "neither id nor name");
    is_int(roundtrip(reg, "remove id -3"), 400, "a negative id");
    is_int(roundtrip(reg, "remove id 1x"), 400, "a non-numeric id");
    is_int(roundtrip(reg, "remove"), 400, "no argument");
    is_int(roundtrip(reg, "delete name a"), 400, "delete takes an id");
    is_int(roundtrip(reg, "readd name a"), 200, "re-add by name");
    ok(srt_hook_registry_active(reg) == 2, "both active again");
    is_int(roundtrip(reg, "remove name b"), 200, "remove by name");
    ok(srt_hook_registry_active(reg) == 1, "one active");
    is_int(roundtrip(reg, "delete id 2"), 200, "delete");
    ok(strstr(body, "\"name\":\"b\"") == NULL, "a deleted hook is not listed: %s", body);
    is_int(roundtrip(reg, "readd id 2"), 404, "a deleted hook cannot come back");
    is_int(roundtrip(NULL, "list"), 200, "no registry: list");
    ok(strstr(body, "\"hooks\":[]") != NULL, "an empty listing: %s", body);
    is_int(roundtrip(NULL, "remove id 1"), 404, "no registry: nothing to remove");

    srt_hook_registry_free(reg);
    srt_chan_detach(chan);
    munmap(mem, size);
    return tap_done();
}
