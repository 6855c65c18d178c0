# Shared-memory channel between nginx workers and the scheduler process (no nginx headers).
# channel.h is the contract; channel_internal.h names the job of each file.
ENGINE_SRCS += src/ipc/channel.c src/ipc/chan_slots.c src/ipc/chan_doorbell.c src/ipc/chan_lock.c \
               src/ipc/chan_metrics.c src/ipc/chan_admin.c
