ENGINE_SRCS += src/util/log.c
ENGINE_SRCS += src/util/json_depth.c
