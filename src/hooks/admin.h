/* srt_admin: hook registry commands carried over the channel's admin mailbox.
 *
 * A command is one line of text, built by the nginx worker from the request:
 *   "list"
 *   "remove id N" | "remove name SPEC"
 *   "readd id N"  | "readd name SPEC"
 *   "delete id N"
 * The scheduler applies it between forward passes (the registry has no lock) and answers
 * an HTTP status and a JSON body: the registry listing (srt_hook_registry_list_json) on
 * success, an OpenAI-style error object otherwise. */
#ifndef SRT_HOOKS_ADMIN_H
#define SRT_HOOKS_ADMIN_H

#include <stddef.h>

#include "hooks/registry.h"
#include "ipc/channel.h"

/* Apply one command to reg (may be NULL: no srt_forward_hooks). Returns the HTTP status;
 * *body is malloc'd JSON (NULL only when out of memory), *len its length. */
int srt_hook_admin_apply(srt_hook_registry *reg, const char *cmd, char **body, size_t *len);

/* Apply cmd and send its answer through c's admin mailbox (500 with an error object when out
 * of memory or when the listing does not fit the mailbox). */
void srt_hook_admin_answer(srt_chan *c, srt_hook_registry *reg, const char *cmd);

/* Scheduler loop: answer the pending admin command, if any. Returns 1 if one was served. */
int srt_chan_sched_admin_serve(srt_chan *c, srt_hook_registry *reg);

#endif
