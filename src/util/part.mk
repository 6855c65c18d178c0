# Small shared pieces: logging, JSON depth, the dtype table.
ENGINE_SRCS += src/util/log.c src/util/json_depth.c src/util/dtype.c src/util/file.c
