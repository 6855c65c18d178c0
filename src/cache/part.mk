ENGINE_SRCS += src/cache/kv_alloc.c src/cache/radix_cache.c
UNIT_TESTS  += $(BUILD)/t/test_kvalloc $(BUILD)/t/test_radix
