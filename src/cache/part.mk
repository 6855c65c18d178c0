# KV slot allocator and radix prefix cache.
ENGINE_SRCS += src/cache/kv_alloc.c src/cache/radix_cache.c
