ENGINE_SRCS += src/util/log.c
