/* Returned activations ("return_activations", srt/request.h): the scheduler captures the
 * output of the modules a request names, for that request's rows only, through a forward
 * hook the capture attaches to each such module while some live request needs it (and
 * deletes when none does), so batches without a capturing request run as before.
 *
 * The capture hook is attached after the model's own hooks (srt_forward_hooks and control
 * vectors are registered at start-up), so it sees what the module hands on: the output
 * after every forward hook, as a hook library registered on the module sees it when no
 * later hook changes it. It is listed by srt_admin under the spec name "return_activations".
 *
 * Rows are kept by position: a row whose position was seen before (a retracted request
 * computed again) is skipped, so a choice's rows are each position once, in order.
 *
 * Threading: as the registry (the scheduler thread, between forward passes). */
#ifndef SRT_HOOKS_ACTIVATIONS_H
#define SRT_HOOKS_ACTIVATIONS_H

#include <stddef.h>
#include <stdint.h>

#include "srt/common.h"
#include "srt/request.h"
#include "hooks/registry.h"

typedef struct srt_act_capture srt_act_capture;

/* Over the model's registry (which must outlive the capture); hidden: the rows' width;
 * max_bytes: a choice's area (srt_max_activation_bytes): captures that would exceed it stop
 * growing and fail at write. */
srt_act_capture *srt_act_capture_new(srt_hook_registry *reg, int64_t hidden, int32_t n_layers,
                                     uint64_t max_bytes, srt_err *err);
/* Deletes the capture's hook registrations: call before srt_hook_registry_free. NULL is fine. */
void srt_act_capture_free(srt_act_capture *c);

/* Start capturing for request id (a->n == 0: nothing to do). The specs are read once
 * (a may be shared memory) and checked again here: a module that is not a capturable one,
 * an unknown reduce or dtype is an error naming it. c may be NULL: then any spec is refused. */
int  srt_act_capture_begin(srt_act_capture *c, uint64_t id, const srt_request_activations *a,
                           srt_err *err);
/* 1 when request id captures something. */
int  srt_act_capture_has(const srt_act_capture *c, uint64_t id);
/* The request's records (srt_act_record + data, per spec in order) into dst: *len bytes.
 * last_pos: the position whose row produced the request's last token (prompt + output - 2);
 * "all"/"mean" must have seen positions 0..last_pos, "last" that one. SRT_ERROR with a
 * message when a row is missing or the records do not fit in cap. */
int  srt_act_capture_write(srt_act_capture *c, uint64_t id, int64_t last_pos, void *dst, size_t cap,
                           size_t *len, srt_err *err);
/* Forget request id; detaches module hooks no other request needs. */
void srt_act_capture_end(srt_act_capture *c, uint64_t id);

#endif
