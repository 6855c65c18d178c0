# Forward hooks: spec parsing, matching, factory loading, registry, dispatch.
ENGINE_SRCS += src/hooks/dispatch.c src/hooks/tensor_util.c
