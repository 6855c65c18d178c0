# Shared-memory channel between nginx workers and the scheduler process (no nginx headers).
ENGINE_SRCS += src/ipc/channel.c
