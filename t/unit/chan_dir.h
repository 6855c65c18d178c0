/* The directory for the doorbells and locks of the channels a unit test makes (nginx uses
 * srt_temp_path): one per test process, mode 0700 (srt_chan_sock_dir_make), made on first use
 * and removed when the process that made it exits; forked children leave it alone. Every
 * channel of one process shares it, as every model of one nginx shares srt_temp_path (the
 * model-key lock relies on that). */
#ifndef SRT_T_CHAN_DIR_H
#define SRT_T_CHAN_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ipc/channel.h"

static char  chan_dir_path[SRT_CHAN_SOCK_DIR_MAX];
static pid_t chan_dir_owner;

static void chan_dir_cleanup(void)
{
    if (getpid() == chan_dir_owner)
        srt_chan_sock_dir_remove(chan_dir_path);
}

/* Fills cfg->sock_dir; bails out of the test when no directory can be made. */
static void chan_dir_set(srt_chan_config *cfg)
{
    if (chan_dir_owner == 0) {
        srt_err err;
        if (srt_chan_sock_dir_make(chan_dir_path, sizeof chan_dir_path, &err) != SRT_OK) {
            printf("Bail out! %s\n", err.msg);
            exit(1);
        }
        chan_dir_owner = getpid();
        atexit(chan_dir_cleanup);
    }
    snprintf(cfg->sock_dir, sizeof cfg->sock_dir, "%s", chan_dir_path);
}

#endif
